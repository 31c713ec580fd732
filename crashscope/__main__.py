from crashscope.cli import main

main()
