"""SQL catalog: tables, engine set-up and the queries the services need."""
