"""Bridges to other systems, each needing an optional extra; the core never imports them."""
