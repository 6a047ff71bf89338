#!/bin/sh
# One RabbitMQ user per spotsweep role on an existing broker (docs/security.md),
# the same users and permissions as definitions.json. Passwords come from the
# environment (never from flags of this script):
#   SPOTSWEEP_PLANNER_PASSWORD SPOTSWEEP_COLLECTOR_PASSWORD
#   SPOTSWEEP_AGENT_PASSWORD SPOTSWEEP_SUBMITTER_PASSWORD
#   (and SPOTSWEEP_KEDA_PASSWORD for KEDA's scaler, optional)
# Usage: deploy/rabbitmq/users.sh [VHOST]   (default /). Idempotent.
# The planner declares the topology when it starts; the other users only check it.
set -eu
VHOST="${1:-/}"
rabbitmqctl -q add_vhost "$VHOST" 2>/dev/null || true

user() {  # name password configure write read
  if rabbitmqctl -q list_users | cut -f1 | grep -qx "$1"; then
    printf '%s' "$2" | rabbitmqctl -q change_password "$1"
  else
    printf '%s' "$2" | rabbitmqctl -q add_user "$1"
  fi
  rabbitmqctl -q set_permissions -p "$VHOST" "$1" "$3" "$4" "$5"
}

user spotsweep-planner "${SPOTSWEEP_PLANNER_PASSWORD:?}" '^spotsweep\.' '^spotsweep\.' '^spotsweep\.'
user spotsweep-collector "${SPOTSWEEP_COLLECTOR_PASSWORD:?}" '^$' '^spotsweep\.dlx$' '^spotsweep\.collector$'
user spotsweep-agent "${SPOTSWEEP_AGENT_PASSWORD:?}" '^amq\.gen-' \
  '^(spotsweep\.events|spotsweep\.dlx|amq\.gen-.*)$' '^(spotsweep\.trials\..+|spotsweep\.control|amq\.gen-.*)$'
user spotsweep-submitter "${SPOTSWEEP_SUBMITTER_PASSWORD:?}" '^$' '^amq\.default$' '^$'
# KEDA's RabbitMQ scaler (docs/deploy.md): reads queue lengths through the management API
# (tag monitoring) and may do nothing in the vhost. Made only when its password is given.
if [ -n "${SPOTSWEEP_KEDA_PASSWORD:-}" ]; then
  user spotsweep-keda "$SPOTSWEEP_KEDA_PASSWORD" '^$' '^$' '^$'
  rabbitmqctl -q set_user_tags spotsweep-keda monitoring
fi
echo "spotsweep users ready in vhost $VHOST: planner SPOTSWEEP_SUBMITTERS=spotsweep-submitter, agents SPOTSWEEP_PLANNER_USER=spotsweep-planner"
