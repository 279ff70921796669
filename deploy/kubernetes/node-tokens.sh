#!/usr/bin/env bash
# Give every GPU node an ingest token and store them in the Secret fleetwatch-agent-tokens, one
# key per Kubernetes node name (the agent DaemonSet reads /etc/fleetwatch-agent/tokens/<node>).
# Nodes that have a token in the Secret keep it; new nodes get one made by
# `fleetwatch token create NODE`, run in a worker pod (which holds the database settings).
# Run it again when nodes join. Needs kubectl with rights on the namespace's Secrets and exec.
#
#   NAMESPACE=fleetwatch NODE_SELECTOR=nvidia.com/gpu.present=true deploy/kubernetes/node-tokens.sh
set -euo pipefail

namespace=${NAMESPACE:-fleetwatch}
selector=${NODE_SELECTOR:-nvidia.com/gpu.present=true}
secret=${SECRET_NAME:-fleetwatch-agent-tokens}
kubectl=${KUBECTL:-kubectl}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 0700 "$dir"

# The tokens already stored: "<key> <base64 value>" lines.
if "$kubectl" -n "$namespace" get secret "$secret" >/dev/null 2>&1; then
    "$kubectl" -n "$namespace" get secret "$secret" \
        -o go-template='{{range $k, $v := .data}}{{$k}} {{$v}}{{"\n"}}{{end}}' |
        while read -r key value; do
            [ -n "$key" ] && printf '%s' "$value" | base64 -d >"$dir/$key"
        done
fi

nodes=$("$kubectl" get nodes -l "$selector" -o jsonpath='{.items[*].metadata.name}')
if [ -z "$nodes" ]; then
    echo "node-tokens: no node matches the label selector $selector" >&2
    exit 1
fi
created=0
for node in $nodes; do
    if [ -s "$dir/$node" ]; then
        continue
    fi
    token=$("$kubectl" -n "$namespace" exec deploy/fleetwatch-worker -- fleetwatch token create "$node")
    case "$token" in
        fwt_*) printf '%s' "$token" >"$dir/$node" ;;
        *)
            echo "node-tokens: 'fleetwatch token create $node' printed no token" >&2
            exit 1
            ;;
    esac
    created=$((created + 1))
done

"$kubectl" -n "$namespace" create secret generic "$secret" --from-file="$dir" \
    --dry-run=client -o yaml | "$kubectl" apply -f -
echo "node-tokens: $created new token(s); $(ls "$dir" | wc -l) node(s) in secret/$secret"
