"""Data subjects (contract section 17): erasures and their suppressions, and retention."""
