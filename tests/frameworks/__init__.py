"""Real frameworks driven offline by scripted models: the spans they emit are what harvester must read."""
