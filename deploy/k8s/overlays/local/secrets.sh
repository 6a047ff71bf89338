#!/bin/sh
# The local overlay's Secrets, with fresh random passwords (nothing secret is in git):
# the backing services' (spotsweep-dev-backing: the database's and MinIO's passwords,
# and RabbitMQ's definitions, deploy/rabbitmq/definitions.json with a password per role)
# and every role's, each naming its own broker user. Idempotent: run it again to rotate
# (then restart the pods, and `kubectl -n spotsweep delete pod -l app.kubernetes.io/name=postgres`
# and rabbitmq, whose data dies with them, so they take the new passwords).
# Usage: deploy/k8s/overlays/local/secrets.sh [NAMESPACE]   (default spotsweep)
set -eu
NS="${1:-spotsweep}"
DEFINITIONS="$(dirname "$0")/../../../rabbitmq/definitions.json"
random() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }   # hex: no character KEDA or a URL would need escaped
PG_PASSWORD="$(random)"; S3_ACCESS="spotsweep"; S3_SECRET="$(random)"
PLANNER="$(random)"; COLLECTOR="$(random)"; AGENT="$(random)"; SUBMITTER="$(random)"; KEDA="$(random)"
amqp() { echo "amqp://spotsweep-$1:$2@rabbitmq.${NS}.svc:5672/%2F"; }
DB_URL="postgresql://spotsweep:${PG_PASSWORD}@postgres.${NS}.svc:5432/spotsweep"
definitions="$(sed -e "s/change-me-planner/$PLANNER/" -e "s/change-me-collector/$COLLECTOR/" -e "s/change-me-agent/$AGENT/" \
                   -e "s/change-me-submitter/$SUBMITTER/" -e "s/change-me-keda/$KEDA/" "$DEFINITIONS")"

secret() {  # name, then --from-literal=key=value...
  name="$1"; shift
  kubectl -n "$NS" create secret generic "$name" "$@" --dry-run=client -o yaml | kubectl -n "$NS" apply -f -
}
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS"
secret spotsweep-dev-backing --from-literal=postgres-password="$PG_PASSWORD" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET" \
  --from-literal=rabbitmq-definitions.json="$definitions" \
  --from-literal=rabbitmq-load.conf="load_definitions = /etc/rabbitmq/definitions/definitions.json"
secret spotsweep-planner --from-literal=amqp-url="$(amqp planner "$PLANNER")" --from-literal=database-url="$DB_URL" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-collector --from-literal=amqp-url="$(amqp collector "$COLLECTOR")" --from-literal=database-url="$DB_URL"
secret spotsweep-reporter --from-literal=database-url="$DB_URL" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-agent --from-literal=amqp-url="$(amqp agent "$AGENT")" \
  --from-literal=s3-access-key="$S3_ACCESS" --from-literal=s3-secret-key="$S3_SECRET"
secret spotsweep-keda --from-literal=username=spotsweep-keda --from-literal=password="$KEDA"
# For `spotsweep submit` (docs/deploy.md "Local": through the planner's pod, or your own machine
# with kubectl port-forward svc/rabbitmq 5672 and 127.0.0.1 in the URL):
secret spotsweep-submitter --from-literal=amqp-url="$(amqp submitter "$SUBMITTER")"
echo "Secrets ready in namespace $NS (broker users per role: spotsweep-planner, -collector, -agent, -submitter, -keda)."
