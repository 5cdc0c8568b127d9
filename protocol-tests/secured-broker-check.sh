#!/usr/bin/env bash
# Checks the secured mode of protocol-tests/kafka-broker.sh (KAFKA_SECURITY=1) with Kafka's own
# Java tools (TopicCommand, AclCommand, ConsoleProducer, ConsoleConsumer) from the broker's
# classpath: it starts a secured broker, runs every check, prints one line per check
# (PASS name / FAIL name: why), stops the broker and exits 1 if any check failed.
#
#   protocol-tests/secured-broker-check.sh
#
# Environment:
#   KAFKA_PORT   the broker's PLAINTEXT port (default 19500); the secured mode uses KAFKA_PORT..+4
#   KAFKA_DIR    the broker's state directory (default: a fresh one under /tmp, deleted at the
#                end; one given here is kept)
#   KAFKA_VERSION  as for kafka-broker.sh
#   KEEP=1       leave the broker running and the scratch files in place (for a closer look)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
broker=$here/kafka-broker.sh
export KAFKA_PORT=${KAFKA_PORT:-19500}
export KAFKA_SECURITY=1 KAFKA_NODES=1
own_dir=no
if [ -z "${KAFKA_DIR:-}" ]; then
  KAFKA_DIR=$(mktemp -d "/tmp/onceflow-secured-check-$KAFKA_PORT.XXXXXX")
  own_dir=yes
fi
export KAFKA_DIR
work=$(mktemp -d "/tmp/onceflow-secured-check-work.XXXXXX")
failed=0

log() { printf 'secured-broker-check: %s\n' "$*" >&2; }

cleanup() {
  if [ "${KEEP:-}" = 1 ]; then
    log "KEEP=1: broker left running (KAFKA_DIR=$KAFKA_DIR), scratch files in $work"
    return
  fi
  bash "$broker" stop >/dev/null 2>&1 || true
  rm -rf "$work"
  if [ "$own_dir" = yes ]; then rm -rf "$KAFKA_DIR"; fi
}
trap cleanup EXIT

jars=$(bash "$broker" classpath) || { log "could not resolve Kafka's classpath"; exit 1; }
log "starting a secured broker on 127.0.0.1:$KAFKA_PORT..$((KAFKA_PORT + 4)) in $KAFKA_DIR"
bash "$broker" start >/dev/null || { log "the secured broker did not start"; exit 1; }
# shellcheck disable=SC1091
. "$KAFKA_DIR/security.env"
security_log=$KAFKA_DIR/logs/security.log

# The tools log their errors (stack traces included: the cause of an SSL handshake failure is
# only there) to stderr; a JVM tuned to start fast, since every check is one.
cat >"$work/log4j2.properties" <<'L4J'
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = error
rootLogger.appenderRef.err.ref = err
L4J
tool() { # CLASS ARGS...: a Kafka tool, 120 s at most
  timeout 120 java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$work/log4j2.properties" -cp "$jars/*" "$@"
}
topics() { tool org.apache.kafka.tools.TopicCommand "$@"; }

# check NAME ok|fail REGEX -- COMMAND...: COMMAND must exit 0 (ok) or non-zero (fail), and its
# output (stdout and stderr) must match the extended regex REGEX ('' for any).
check() {
  local name=$1 want=$2 regex=$3 rc=0
  shift 4
  "$@" >"$work/$name.out" 2>&1 || rc=$?
  local why=
  if [ "$want" = ok ] && [ "$rc" != 0 ]; then why="exit status $rc"; fi
  if [ "$want" = fail ] && [ "$rc" = 0 ]; then why="succeeded, a failure was expected"; fi
  if [ -z "$why" ] && [ -n "$regex" ] && ! grep -Eq -- "$regex" "$work/$name.out"; then
    why="output does not match /$regex/"
  fi
  if [ -z "$why" ]; then
    echo "PASS $name"
  else
    echo "FAIL $name: $why; last lines of its output:"
    grep -v '^\s*at ' "$work/$name.out" | tail -8 | sed 's/^/    /'
    failed=1
  fi
}

# Client configurations.
common="request.timeout.ms=20000
default.api.timeout.ms=40000"
props() { # NAME LINES...: $work/NAME.properties
  local f=$work/$1.properties
  shift
  printf '%s\n' "$common" "$@" >"$f"
  echo "$f"
}
ssl=$(props ssl security.protocol=SSL ssl.truststore.type=PEM "ssl.truststore.location=$CA_PEM")
cat "$CLIENT_KEY" "$CLIENT_PEM" >"$work/client-keystore.pem"
mtls=$(props mtls security.protocol=SSL ssl.truststore.type=PEM "ssl.truststore.location=$CA_PEM" \
  ssl.keystore.type=PEM "ssl.keystore.location=$work/client-keystore.pem")
other_ca=$(props other-ca security.protocol=SSL ssl.truststore.type=PEM "ssl.truststore.location=$OTHER_CA_PEM")
sasl() { # NAME PROTOCOL MECHANISM JAAS [LINES...]
  local name=$1 protocol=$2 mech=$3 jaas=$4
  shift 4
  local tls=()
  [ "$protocol" = SASL_SSL ] && tls=(ssl.truststore.type=PEM "ssl.truststore.location=$CA_PEM")
  props "$name" "security.protocol=$protocol" "sasl.mechanism=$mech" "sasl.jaas.config=$jaas" \
    ${tls[@]+"${tls[@]}"} "$@"
}
plain_jaas() { echo "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$1\" password=\"$2\";"; }
scram_jaas() { echo "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$1\" password=\"$2\";"; }
oauth_jaas() { echo "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"$1\";"; }
plain_ssl=$(sasl plain-ssl SASL_SSL PLAIN "$(plain_jaas alice alice-secret)")
scram256=$(sasl scram256 SASL_SSL SCRAM-SHA-256 "$(scram_jaas alice alice-secret)")
scram512=$(sasl scram512 SASL_SSL SCRAM-SHA-512 "$(scram_jaas alice alice-secret)")
oauth=$(sasl oauth SASL_SSL OAUTHBEARER "$(oauth_jaas alice)")
oauth_bob=$(sasl oauth-bob SASL_SSL OAUTHBEARER "$(oauth_jaas bob)")
bob=$(sasl bob SASL_SSL SCRAM-SHA-256 "$(scram_jaas bob bob-secret)")
plain_pt=$(sasl plain-pt SASL_PLAINTEXT PLAIN "$(plain_jaas alice alice-secret)")
plain_pt_bad=$(sasl plain-pt-bad SASL_PLAINTEXT PLAIN "$(plain_jaas alice wrong-password)")

# OAUTHBEARER with a token made here, as a client of our own would send it (the unsecured
# login module makes its own): a login callback handler that hands over the "token" option.
b64url() { printf '%s' "$1" | base64 -w0 | tr '+/' '-_' | tr -d '='; }
mkdir -p "$work/classes"
cat >"$work/FixedTokenLoginCallbackHandler.java" <<'JAVA'
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.auth.SaslExtensionsCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

public class FixedTokenLoginCallbackHandler implements AuthenticateCallbackHandler {
    private String token;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
        token = (String) entries.get(0).getOptions().get("token");
    }

    @Override
    public void close() {}

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (callback instanceof OAuthBearerTokenCallback) {
                final String value = token;
                final long expires = System.currentTimeMillis() + 3_600_000L;
                ((OAuthBearerTokenCallback) callback).token(new OAuthBearerToken() {
                    public String value() { return value; }
                    public Set<String> scope() { return Set.of(); }
                    public long lifetimeMs() { return expires; }
                    public String principalName() { return "fixed-token"; }
                    public Long startTimeMs() { return null; }
                });
            } else if (!(callback instanceof SaslExtensionsCallback)) {
                throw new UnsupportedCallbackException(callback);
            }
        }
    }
}
JAVA
javac -nowarn -d "$work/classes" -cp "$jars/*" "$work/FixedTokenLoginCallbackHandler.java" \
  || { log "javac failed"; exit 1; }
jars_and_handler="$jars/*:$work/classes"
token_tool() { # PROPERTIES ARGS...: TopicCommand with the handler on the classpath
  timeout 120 java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$work/log4j2.properties" -cp "$jars_and_handler" \
    org.apache.kafka.tools.TopicCommand "$@"
}
fixed_token() { # NAME TOKEN
  sasl "$1" SASL_SSL OAUTHBEARER \
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required token=\"$2\";" \
    sasl.login.callback.handler.class=FixedTokenLoginCallbackHandler
}
exp=$(( $(date +%s) + 3600 ))
header=$(b64url '{"alg":"none"}')
token_ok=$(fixed_token token-ok "$header.$(b64url "{\"sub\":\"alice\",\"exp\":$exp}").")
token_no_exp=$(fixed_token token-no-exp "$header.$(b64url '{"sub":"alice"}').")
token_no_sub=$(fixed_token token-no-sub "$header.$(b64url "{\"exp\":$exp}").")

created='Created topic'
denied='TopicAuthorizationException|Authorization failed|not authorized'
create() { # BOOTSTRAP PROPERTIES TOPIC
  topics --bootstrap-server "$1" --command-config "$2" --create --topic "$3" --partitions 1 --replication-factor 1
}

# 1. TLS without a client certificate.
check ssl-server-only-list ok '' -- topics --bootstrap-server "$SSL_BOOTSTRAP" --command-config "$ssl" --list
# 2. Mutual TLS: allowed by User:onceflow-client's ACL; and that is its principal: an operation
#    its ACLs do not allow (creating ACLs: Alter on the cluster) is denied to that name (were it
#    User:ANONYMOUS, a super user, it would be allowed).
check mtls-create-topic ok "$created" -- create "$SSL_BOOTSTRAP" "$mtls" mtls-topic
check mtls-principal-is-onceflow-client fail 'ClusterAuthorizationException|not authorized|Authorization failed' -- \
  tool org.apache.kafka.tools.AclCommand --bootstrap-server "$SSL_BOOTSTRAP" --command-config "$mtls" \
    --add --allow-principal User:bob --operation Read --topic mtls-topic
if grep -q 'Principal = User:onceflow-client is Denied' "$security_log"; then
  echo "PASS mtls-denial-logged-for-User:onceflow-client"
else
  echo "FAIL mtls-denial-logged-for-User:onceflow-client: no such line in $security_log"; failed=1
fi
# 3. SASL_SSL, every mechanism, as alice.
check sasl-ssl-plain-create-topic ok "$created" -- create "$SASL_SSL_BOOTSTRAP" "$plain_ssl" plain-ssl-topic
check sasl-ssl-scram-sha-256-create-topic ok "$created" -- create "$SASL_SSL_BOOTSTRAP" "$scram256" scram256-topic
check sasl-ssl-scram-sha-512-create-topic ok "$created" -- create "$SASL_SSL_BOOTSTRAP" "$scram512" roundtrip-topic
check sasl-ssl-oauthbearer-create-topic ok "$created" -- create "$SASL_SSL_BOOTSTRAP" "$oauth" oauth-topic
check sasl-ssl-scram-sha-512-list ok 'roundtrip-topic' -- \
  topics --bootstrap-server "$SASL_SSL_BOOTSTRAP" --command-config "$scram512" --list
# The OAUTHBEARER principal is the token's sub: sub=bob is denied.
check sasl-ssl-oauthbearer-sub-bob-denied fail "$denied" -- create "$SASL_SSL_BOOTSTRAP" "$oauth_bob" oauth-bob-topic
# A hand-made unsecured JWS: {"alg":"none"} . {"sub":"alice","exp":...} . (empty signature).
check oauthbearer-handmade-token-sub-exp ok "$created" -- \
  token_tool --bootstrap-server "$SASL_SSL_BOOTSTRAP" --command-config "$token_ok" \
    --create --topic token-topic --partitions 1 --replication-factor 1
check oauthbearer-token-without-exp-refused fail 'invalid_token|Authentication failed|SaslAuthenticationException' -- \
  token_tool --bootstrap-server "$SASL_SSL_BOOTSTRAP" --command-config "$token_no_exp" --list
check oauthbearer-token-without-sub-refused fail 'invalid_token|Authentication failed|SaslAuthenticationException' -- \
  token_tool --bootstrap-server "$SASL_SSL_BOOTSTRAP" --command-config "$token_no_sub" --list
# 4. SASL_PLAINTEXT.
check sasl-plaintext-plain-create-topic ok "$created" -- create "$SASL_PLAINTEXT_BOOTSTRAP" "$plain_pt" plain-pt-topic
check sasl-plaintext-plain-wrong-password fail 'Authentication failed.*[Ii]nvalid username or password' -- \
  topics --bootstrap-server "$SASL_PLAINTEXT_BOOTSTRAP" --command-config "$plain_pt_bad" --list
# 5. bob has no ACL.
check sasl-ssl-scram-bob-create-denied fail "$denied" -- create "$SASL_SSL_BOOTSTRAP" "$bob" bob-topic
# 6. TLS failures.
check ssl-other-ca-handshake-fails fail 'SSL handshake failed|PKIX path building failed|unable to find valid certification path' -- \
  topics --bootstrap-server "$SSL_BOOTSTRAP" --command-config "$other_ca" --list
check ssl-127.0.0.2-hostname-mismatch fail 'No subject alternative names matching IP address 127\.0\.0\.2' -- \
  topics --bootstrap-server "127.0.0.2:${SSL_BOOTSTRAP##*:}" --command-config "$ssl" --list
# 7. A round trip over SASL_SSL SCRAM-SHA-512 as alice (an idempotent producer: IdempotentWrite
#    on the cluster; a consumer group: the Group ACL).
produce() {
  printf 'one\ntwo\nthree\n' | tool org.apache.kafka.tools.ConsoleProducer \
    --bootstrap-server "$SASL_SSL_BOOTSTRAP" --producer.config "$scram512" --topic roundtrip-topic
}
consume() {
  tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$SASL_SSL_BOOTSTRAP" \
    --consumer.config "$scram512" --topic roundtrip-topic --group roundtrip-group --from-beginning \
    --max-messages 3 --timeout-ms 60000
}
check console-produce-sasl-ssl-scram-sha-512 ok '' -- produce
check console-consume-sasl-ssl-scram-sha-512 ok 'one' -- consume
if [ "$(grep -E '^(one|two|three)$' "$work/console-consume-sasl-ssl-scram-sha-512.out" | tr '\n' ' ')" = "one two three " ]; then
  echo "PASS console-round-trip-contents"
else
  echo "FAIL console-round-trip-contents: consumed $(tr '\n' ' ' <"$work/console-consume-sasl-ssl-scram-sha-512.out" | cut -c1-200)"; failed=1
fi
# 8. The script's own rules.
check cluster-with-security-refused fail 'KAFKA_SECURITY needs a single-node broker' -- \
  env KAFKA_NODES=3 bash "$broker" start
check bad-security-value-refused fail 'KAFKA_SECURITY must be' -- env KAFKA_SECURITY=tls bash "$broker" start
# 9. restart keeps the SCRAM users, the ACLs (not created again) and the certificates.
check restart ok '' -- bash "$broker" restart
if grep -q 'creating ACLs' "$work/restart.out"; then
  echo "FAIL restart-keeps-acls: ACLs were created again"; failed=1
else
  echo "PASS restart-keeps-acls"
fi
check after-restart-scram-sha-512-create-topic ok "$created" -- create "$SASL_SSL_BOOTSTRAP" "$scram512" after-restart-topic
check after-restart-bob-still-denied fail "$denied" -- create "$SASL_SSL_BOOTSTRAP" "$bob" bob-topic-2
# 10. kill -9 then start at once (the killed JVM may still hold its ports for a moment).
check kill ok 'killed -9' -- bash "$broker" kill
check start-after-kill ok '' -- bash "$broker" start
check after-kill-sasl-plaintext-plain-create-topic ok "$created" -- create "$SASL_PLAINTEXT_BOOTSTRAP" "$plain_pt" after-kill-topic

if [ "$failed" = 0 ]; then log "all checks passed"; else log "some checks failed (outputs in $work with KEEP=1)"; fi
exit "$failed"
