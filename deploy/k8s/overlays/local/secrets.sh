#!/bin/sh
# The local overlay's Secrets, with fresh random passwords (nothing secret is in git):
# the backing services' (spotsweep-dev-backing) and every role's, which name the same
# one broker user. Idempotent: run it again to rotate (then restart the pods, and
# `kubectl -n spotsweep delete pod -l app.kubernetes.io/name=postgres` and rabbitmq,
# whose data dies with them, so they take the new password).
# Usage: deploy/k8s/overlays/local/secrets.sh [NAMESPACE]   (default spotsweep)
set -eu
NS="${1:-spotsweep}"
random() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }   # hex: no character KEDA or a URL would need escaped
AMQP_PASSWORD="$(random)"; PG_PASSWORD="$(random)"; S3_ACCESS="spotsweep"; S3_SECRET="$(random)"
AMQP_URL="amqp://spotsweep:${AMQP_PASSWORD}@rabbitmq.${NS}.svc:5672/%2F"
DB_URL="postgresql://spotsweep:${PG_PASSWORD}@postgres.${NS}.svc:5432/spotsweep"

secret() {  # name, then --from-literal=key=value...
  name="$1"; shift
  kubectl -n "$NS" create secret generic "$name" "$@" --dry-run=client -o yaml | kubectl -n "$NS" apply -f -
}
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS"
secret spotsweep-dev-backing --from-literal=rabbitmq-password="$AMQP_PASSWORD" --from-literal=postgres-password="$PG_PASSWORD" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-planner --from-literal=amqp-url="$AMQP_URL" --from-literal=database-url="$DB_URL" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-collector --from-literal=amqp-url="$AMQP_URL" --from-literal=database-url="$DB_URL"
secret spotsweep-reporter --from-literal=database-url="$DB_URL" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-agent --from-literal=amqp-url="$AMQP_URL" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-keda --from-literal=username=spotsweep --from-literal=password="$AMQP_PASSWORD"
echo "Secrets ready in namespace $NS (the broker, database and MinIO user: spotsweep)."
