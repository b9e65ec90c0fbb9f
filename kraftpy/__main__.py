from kraftpy.cli.main import main

main()
