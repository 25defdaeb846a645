#!/usr/bin/env bash
# Call 1 ran the seventeenth session's call unchanged, on the bundle it describes (built
# from 6977a39 with ../../s30-bulk-stores/stream-loads.patch, and its bulk-stores-only base).
exec bash "$(dirname "$0")/../../s30-bulk-stores/call1-not-run.sh"
