"""The preference feature's nominations: a pod stating a preference is nominated for its
preferred node before its scheduling cycle (extender.preference.nominations)."""
