"""The `inhouse` command: one small module per subcommand, each handing off to the library."""
