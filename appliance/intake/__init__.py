"""Hot-folder intake: watching, settling, completeness checks, filtering and claiming files."""
