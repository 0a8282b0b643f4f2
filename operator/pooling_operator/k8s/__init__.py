"""Every call to the API server goes through here."""
