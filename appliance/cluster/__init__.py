"""Several appliances as one service: the PostgreSQL journal, its audit chain and the cluster's nodes."""
