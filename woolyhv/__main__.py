from woolyhv.cli import main

main()
