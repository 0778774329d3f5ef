"""Generated gRPC stubs for package specdec.v1 (built from protos/ at install time; not edited by hand)."""
