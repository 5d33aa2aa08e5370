"""The local control API: appliance.v1 over gRPC on a unix socket (server, client, conversions)."""
