#!/usr/bin/env bash
# Installs what tests/test_browser.py needs: Debian's Chromium (only when missing; Playwright's own
# browser downloads are not used), Playwright's Python package, and JupyterLab with ipykernel.
# CI runs this before the tests and exports WORKBENCH_REQUIRE_BROWSER=1, so a missing piece fails
# the browser test instead of skipping it.
set -euo pipefail

chromium_path() {
  if [ -x /usr/bin/chromium ]; then echo /usr/bin/chromium; return 0; fi
  command -v chromium 2>/dev/null || return 1
}

if ! chromium_path >/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
      echo "browser_setup: Chromium is missing and installing it needs root (apt-get install chromium)" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
echo "browser_setup: $(chromium_path) ($("$(chromium_path)" --version 2>/dev/null || echo 'version unknown'))"

python -m pip install -q playwright "jupyterlab>=4.4" "ipykernel>=7" "ipywidgets>=8.1"
python -c "import playwright.sync_api, jupyterlab, jupyterlab_widgets; print('browser_setup: playwright, jupyterlab and the widgets extension import')"
