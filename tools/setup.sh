#!/usr/bin/env bash
# Installs what building and testing brisk needs, and only what is missing
# (Debian/Ubuntu). Uses sudo when not run as root.
set -euo pipefail
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
need=()
for p in libpcre2-dev libcjson-dev libmicrohttpd-dev libcurl4-openssl-dev; do         # headers: ask dpkg
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
for c in cc:build-essential make:build-essential clang:clang git:git python3:python3 \
         chromium:chromium; do   # tools: ask the PATH (chromium: tests/t_webui.sh)
  command -v "${c%%:*}" >/dev/null 2>&1 || need+=("${c#*:}")
done
# node/npm may come from elsewhere than Debian (a Debian npm would conflict with it)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
