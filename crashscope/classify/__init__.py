"""The trained cause classifier: secondary evidence beside the rules.

* :mod:`crashscope.classify.features`: ``FEATURES`` and ``extract(timeline, findings)``.
* :mod:`crashscope.classify.model`: ``load_model()`` and ``Model.predict_proba`` (numpy
  only; the shipped model is ``crashscope/data/classifier.json``).
* :mod:`crashscope.classify.train`: ``train(...)`` (scikit-learn, imported only there), used
  by ``crashscope train``.

Nothing is imported here so that ``import crashscope.classify`` stays cheap.
"""
