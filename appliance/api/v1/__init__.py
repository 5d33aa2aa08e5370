"""appliance.v1: the .proto and the modules `make proto` generates from it (committed)."""
