#!/bin/sh
# The Kafka image's entrypoint: the official apache/kafka image's conventions, so either image
# can run behind the harness.
#   KAFKA_<KEY> environment variables become server.properties, with the official image's
#   renaming: "_" -> ".", "__" -> "_", "___" -> "-" (KAFKA_MAX_CONNECTIONS_PER_IP=20 is
#   max.connections.per.ip=20); KAFKA_HEAP_OPTS / KAFKA_JVM_OPTS / KAFKA_OPTS are JVM options.
#   CLUSTER_ID formats the KRaft storage once (a container restart keeps it).
#   HARNESS_SERVER_PROPERTIES: a mounted server.properties to run instead (the harness's
#   secured listeners: secrets stay out of the environment); HARNESS_FORMAT_ARGS: a mounted
#   JVM argument file (java @file) that formats the storage with its SCRAM users, removed once
#   read, its output (secret) into HARNESS_FORMAT_LOG.
#   HARNESS_WATCH_PID (with --pid=host; HARNESS_WATCH_PID_START its start time): the broker
#   stops when that host process is gone, so a SIGKILLed harness leaves no broker running; the
#   harness sweeps the exited container later.
set -eu
conf_dir=/opt/kafka/config
mkdir -p "$conf_dir"
if [ -n "${HARNESS_SERVER_PROPERTIES:-}" ]; then
    conf=$HARNESS_SERVER_PROPERTIES
else
    conf=$conf_dir/server.properties
    : >"$conf"
    env | grep '^KAFKA_' | sort | while IFS='=' read -r name value; do
        case "$name" in
        KAFKA_HEAP_OPTS | KAFKA_JVM_OPTS | KAFKA_OPTS | KAFKA_LOG4J_OPTS) continue ;;
        esac
        key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' |
            sed -e 's/___/-/g' -e 's/__/\x01/g' -e 's/_/./g' -e 's/\x01/_/g')
        printf '%s=%s\n' "$key" "$value" >>"$conf"
    done
fi

cp="/opt/kafka/libs/*"
# log4j2 for Kafka 4.x, log4j 1 (reload4j) before it; each ignores the other's property
log4j="-Dlog4j2.configurationFile=file:$conf_dir/log4j2.properties -Dlog4j.configuration=file:$conf_dir/log4j.properties"
heap=${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}
jvm=${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:MaxDirectMemorySize=256m -Djava.awt.headless=true}

data=$(sed -n 's/^log\.dirs=//p' "$conf" | cut -d, -f1)
if [ -n "$data" ] && [ ! -f "$data/meta.properties" ]; then
    : "${CLUSTER_ID:?CLUSTER_ID is needed to format the KRaft storage}"
    echo "== kafka-entrypoint: formatting KRaft storage in $data =="
    if [ -n "${HARNESS_FORMAT_ARGS:-}" ]; then
        echo "== kafka-entrypoint: with SCRAM users; its output (secret) is in $HARNESS_FORMAT_LOG =="
        rc=0
        # shellcheck disable=SC2086
        java $heap -XX:TieredStopAtLevel=1 $log4j -cp "$cp" "@$HARNESS_FORMAT_ARGS" \
            >"$HARNESS_FORMAT_LOG" 2>&1 || rc=$?
        rm -f "$HARNESS_FORMAT_ARGS"
        [ "$rc" -eq 0 ] || { echo "== kafka-entrypoint: format exited $rc; see $HARNESS_FORMAT_LOG =="; exit "$rc"; }
    else
        # shellcheck disable=SC2086
        java $heap -XX:TieredStopAtLevel=1 $log4j -cp "$cp" kafka.tools.StorageTool \
            format -t "$CLUSTER_ID" -c "$conf" --ignore-formatted
    fi
fi

echo "== kafka-entrypoint: kafka.Kafka $conf =="
# shellcheck disable=SC2086
java $heap $jvm ${KAFKA_OPTS:-} $log4j -cp "$cp" kafka.Kafka "$conf" &
broker=$!
trap 'kill -TERM "$broker" 2>/dev/null' TERM INT
started() { # a process's start time (/proc/PID/stat field 22): a recycled pid differs
    sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}
watched_alive() {
    kill -0 "$HARNESS_WATCH_PID" 2>/dev/null || return 1
    [ -z "${HARNESS_WATCH_PID_START:-}" ] || [ "$(started "$HARNESS_WATCH_PID")" = "$HARNESS_WATCH_PID_START" ]
}
if [ -n "${HARNESS_WATCH_PID:-}" ]; then
    (
        while watched_alive && kill -0 "$broker" 2>/dev/null; do
            sleep 1
        done
        if kill -0 "$broker" 2>/dev/null; then
            echo "== kafka-entrypoint: process $HARNESS_WATCH_PID is gone; stopping the broker =="
            kill -KILL "$broker"
        fi
    ) &
fi
# "wait" returns early when a trapped signal arrives; wait again for the JVM's own exit.
rc=0
wait "$broker" || rc=$?
if kill -0 "$broker" 2>/dev/null; then
    rc=0
    wait "$broker" || rc=$?
fi
exit "$rc"
