"""Tests of the kernel log readers: Xid lines, /dev/kmsg and followed files."""
