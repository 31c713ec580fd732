"""crashscope: why did this multi-node GPU training job die?"""

__version__ = "0.1.0"
