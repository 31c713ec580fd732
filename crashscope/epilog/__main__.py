from crashscope.epilog import main

main()
