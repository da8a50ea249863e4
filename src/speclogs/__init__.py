"""speclogs: forensics for SGLang speculative-decoding runs."""

__version__ = "0.1.0"
