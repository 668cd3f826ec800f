from tito_cli.cli import main

main()
