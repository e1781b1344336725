#!/usr/bin/env bash
# Creates the users/vhosts the needs_users tests expect on an external RabbitMQ.
# Usage: tests/python/setup_rabbitmq.sh <node-name>   (run as the user owning the node's cookie)
set -euo pipefail
NODE=${1:-rabbit@localhost}
CTL=${RABBITMQCTL:-/usr/lib/rabbitmq/bin/rabbitmqctl}
$CTL -n "$NODE" add_user alice secret || true
$CTL -n "$NODE" set_user_tags alice administrator
$CTL -n "$NODE" add_user reader reader || true
$CTL -n "$NODE" add_vhost other || true
$CTL -n "$NODE" set_permissions -p / alice '.*' '.*' '.*'
$CTL -n "$NODE" set_permissions -p other alice '.*' '.*' '.*'
$CTL -n "$NODE" set_permissions -p / reader '^$' '^$' '.*'
$CTL -n "$NODE" add_user dlxuser dlxuser || true
$CTL -n "$NODE" set_permissions -p / dlxuser '.*' '^allowed-' '.*'
$CTL -n "$NODE" add_user dlxnoread dlxnoread || true
$CTL -n "$NODE" set_permissions -p / dlxnoread '.*' '.*' '^$'
