#!/usr/bin/env bash
# Installs Debian's Chromium for the connection-form browser test, and libatomic1 for Playwright's
# own driver, when missing and this is Debian as root. Playwright drives /usr/bin/chromium; it never
# downloads a browser of its own.
set -euo pipefail
if [ -x /usr/bin/chromium ] && /sbin/ldconfig -p | grep -q 'libatomic\.so\.1 '; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "installing chromium, chromium-driver and libatomic1 (Debian)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver libatomic1 > /dev/null
else
    echo "note: no /usr/bin/chromium or libatomic1; the browser test will be skipped (install Debian's chromium)" >&2
fi
