from scheduler.cli.main import main

main()
