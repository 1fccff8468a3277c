#!/usr/bin/env bash
# Installs Debian's Chromium for the connection-form browser test, when it is missing and this is
# Debian as root. Playwright drives /usr/bin/chromium; it never downloads a browser of its own.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "installing chromium and chromium-driver (Debian)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver > /dev/null
else
    echo "note: no /usr/bin/chromium; the browser test will be skipped (install Debian's chromium)" >&2
fi
