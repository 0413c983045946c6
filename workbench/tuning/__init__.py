"""The tuner: a measured search for the fastest config under a memory margin."""
