/*
 * rdkafka-perf: producer and consumer throughput of librdkafka (the C client, Debian's
 * librdkafka-dev), printed in the same machine-readable form as onceflow-perf and the Java peer,
 * so the comparison scripts (benches/run-producer-comparison.sh,
 * benches/run-consumer-comparison.sh) can put it beside them.
 *
 *   rdkafka-perf produce --bootstrap B --topic T --num-records N --record-size S
 *       [--payload random|fixed] [--acks all|1|0] [--linger-ms 5] [--batch-size BYTES]
 *       [--compression none|gzip|snappy|lz4|zstd] [--idempotence true|false]
 *       [--max-buffered-records 1000000] [--max-buffered-kbytes 32768]
 *       [--transactional-id ID --transaction-duration-ms D] [--tls-ca FILE]
 *   rdkafka-perf consume --bootstrap B --topic T --num-records N
 *       [--isolation read_committed|read_uncommitted] [--timeout-ms 30000] [--tls-ca FILE]
 *
 * --tls-ca FILE: security.protocol=ssl, ssl.ca.location=FILE (the PEM CA certificate(s) to
 * trust), ssl.endpoint.identification.algorithm=https (the broker's certificate must be for the
 * host connected to), no client certificate.
 *
 * Both end with one line
 *
 *   librdkafka records=N records_per_sec=X mb_per_sec=Y
 *
 * (mb = 2^20 bytes of record values per second for produce, of keys+values for consume), and
 * exit non-zero after it if fewer than N records were acknowledged / read. Timing mirrors
 * onceflow-perf (benches/perf/src/main.rs): produce from the first send to the last delivery
 * report (client creation, the first connection and init_transactions before it); consume from
 * the topic's partition lookup and assign to the poll that reaches N records (client creation
 * and the first connection before it).
 *
 * This program is a benchmark peer outside the onceflow package (which stays pure Rust).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

static const char *usage =
    "usage:\n"
    "  rdkafka-perf produce --bootstrap B --topic T --num-records N --record-size S\n"
    "      [--payload random|fixed] [--acks all|1|0] [--linger-ms MS] [--batch-size BYTES]\n"
    "      [--compression none|gzip|snappy|lz4|zstd] [--idempotence true|false]\n"
    "      [--max-buffered-records N] [--max-buffered-kbytes KB]\n"
    "      [--transactional-id ID --transaction-duration-ms D] [--tls-ca FILE]\n"
    "  rdkafka-perf consume --bootstrap B --topic T --num-records N\n"
    "      [--isolation read_committed|read_uncommitted] [--timeout-ms MS] [--tls-ca FILE]\n"
    "--tls-ca FILE: TLS (security.protocol=ssl) trusting the PEM CA certificate(s) in FILE, host\n"
    "name verification on (ssl.endpoint.identification.algorithm=https), no client certificate.\n"
    "The last line is machine-readable:\n"
    "  librdkafka records=N records_per_sec=X mb_per_sec=Y\n";

static const char *cmd = "";

static void die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "rdkafka-perf %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "rdkafka-perf: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", usage);
    exit(2);
}

/* --------------------------------------------------------------------------------------------
 * Options: "--name value" pairs, each name allowed once and checked against a list. */

#define MAX_OPTS 32
static const char *opt_names[MAX_OPTS];
static const char *opt_values[MAX_OPTS];
static int n_opts;

static void parse_opts(int argc, char **argv, const char *const *allowed) {
    for (int i = 0; i < argc; i += 2) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) usage_error("unexpected argument '%s'", a);
        int ok = 0;
        for (const char *const *p = allowed; *p; p++)
            if (strcmp(a + 2, *p) == 0) ok = 1;
        if (!ok) usage_error("unknown option '%s'", a);
        if (i + 1 >= argc) usage_error("%s needs a value", a);
        if (n_opts == MAX_OPTS) usage_error("too many options");
        opt_names[n_opts] = a + 2;
        opt_values[n_opts] = argv[i + 1];
        n_opts++;
    }
}

static const char *opt(const char *name, const char *def) {
    for (int i = n_opts - 1; i >= 0; i--)
        if (strcmp(opt_names[i], name) == 0) return opt_values[i];
    return def;
}

static long long opt_num(const char *name, long long def) {
    const char *v = opt(name, NULL);
    if (!v) return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < 0) usage_error("--%s %s: expected a number >= 0", name, v);
    return x;
}

static const char *req(const char *name) {
    const char *v = opt(name, NULL);
    if (!v || !*v) usage_error("--%s is required", name);
    return v;
}

/* -------------------------------------------------------------------------------------------- */

static double now_secs(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void print_final(uint64_t records, double secs, uint64_t bytes) {
    printf("librdkafka records=%" PRIu64 " records_per_sec=%.1f mb_per_sec=%.2f\n", records,
           (double)records / secs, mib(bytes) / secs);
    fflush(stdout);
}

/* SplitMix64, the generator behind Java's SplittableRandom (and onceflow-perf's payload): one
 * 64-bit mix and one modulo per byte, about the work ProducerPerformance does per byte. */
static uint64_t rng_state;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void letters(char *b, size_t n) {
    for (size_t i = 0; i < n; i++) b[i] = (char)('A' + (rng_next() >> 32) % 26);
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        usage_error("%s=%s: %s", name, value, err);
}

/* --tls-ca FILE: TLS trusting FILE's CA certificate(s), the broker's host name verified; no
 * client certificate. Returns what to print as tls=. */
static const char *set_tls(rd_kafka_conf_t *conf) {
    const char *ca = opt("tls-ca", NULL);
    if (!ca) return "off";
    if (access(ca, R_OK) != 0) usage_error("--tls-ca %s: %s", ca, strerror(errno));
    set(conf, "security.protocol", "ssl");
    set(conf, "ssl.ca.location", ca);
    set(conf, "ssl.endpoint.identification.algorithm", "https");
    return ca;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    fprintf(stderr, "librdkafka %d %s: %s\n", level, fac, buf);
}

/* --------------------------------------------------------------------------------------------
 * produce */

static uint64_t acked, failed;
static char first_error[512];

/* Delivery report: served by rd_kafka_poll / rd_kafka_flush on the calling thread. */
static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (failed++ == 0) snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
    } else {
        acked++;
    }
}

/* 1 if e is NULL (success); otherwise formats the error into out, frees it and returns 0. */
static int txn_ok(rd_kafka_error_t *e, const char *what, char *out, size_t outlen) {
    if (!e) return 1;
    snprintf(out, outlen, "%s: %s", what, rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return 0;
}

static int produce(void) {
    const char *bootstrap = opt("bootstrap", "127.0.0.1:9092");
    const char *topic = req("topic");
    uint64_t n = (uint64_t)opt_num("num-records", 0);
    size_t size = (size_t)opt_num("record-size", 0);
    if (n == 0 || !opt("record-size", NULL)) usage_error("--num-records > 0 and --record-size are required");
    const char *payload = opt("payload", "random");
    int fresh;
    if (strcmp(payload, "random") == 0) fresh = 1;
    else if (strcmp(payload, "fixed") == 0) fresh = 0;
    else usage_error("--payload %s: expected random or fixed", payload);
    const char *acks = opt("acks", "all");
    const char *idem = opt("idempotence", "true");
    if (strcmp(idem, "true") != 0 && strcmp(idem, "false") != 0)
        usage_error("--idempotence %s: expected true or false", idem);
    const char *compression = opt("compression", "none");
    const char *txn_id = opt("transactional-id", NULL);
    long long txn_ms = opt_num("transaction-duration-ms", 0);
    if ((txn_id != NULL) != (txn_ms > 0))
        usage_error("--transactional-id and --transaction-duration-ms go together");
    if (txn_id && strcmp(idem, "true") != 0) usage_error("transactions need --idempotence true");
    char linger[32], batch[32], maxrec[32], maxkb[32];
    snprintf(linger, sizeof linger, "%lld", opt_num("linger-ms", 5));
    snprintf(batch, sizeof batch, "%lld", opt_num("batch-size", 16384));
    snprintf(maxrec, sizeof maxrec, "%lld", opt_num("max-buffered-records", 1000000));
    snprintf(maxkb, sizeof maxkb, "%lld", opt_num("max-buffered-kbytes", 32768));

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "acks", acks);
    set(conf, "linger.ms", linger);
    set(conf, "batch.size", batch);
    set(conf, "compression.type", compression);
    set(conf, "enable.idempotence", idem);
    /* As Java's (and onceflow's) max.in.flight.requests.per.connection; librdkafka's default is
     * 1000000 (capped at 5 with idempotence). */
    set(conf, "max.in.flight.requests.per.connection", "5");
    /* The producer's queue: a 32 MiB bound as Java's buffer.memory (librdkafka's default is
     * 1 GiB), and a message bound (default 100000) that the byte bound reaches first at record
     * sizes above 33 bytes. */
    set(conf, "queue.buffering.max.messages", maxrec);
    set(conf, "queue.buffering.max.kbytes", maxkb);
    if (txn_id) set(conf, "transactional.id", txn_id);
    const char *tls = set_tls(conf);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    printf("rdkafka-perf produce: librdkafka=%s topic=%s records=%" PRIu64
           " record_size=%zu payload=%s acks=%s linger_ms=%s batch_size=%s compression=%s "
           "idempotence=%s max_in_flight=5 queue_buffering_max_messages=%s "
           "queue_buffering_max_kbytes=%s transactional_id=%s transaction_duration_ms=%lld tls=%s\n",
           rd_kafka_version_str(), topic, n, size, fresh ? "random-per-record" : "fixed", acks,
           linger, batch, compression, idem, maxrec, maxkb, txn_id ? txn_id : "", txn_ms, tls);
    fflush(stdout);

    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new: %s", err);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    /* Connect and learn the topic first, outside the clock (as onceflow-perf's Producer::new). */
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t merr = rd_kafka_metadata(rk, 0, rkt, &md, 30000);
    if (merr) die("metadata: %s", rd_kafka_err2str(merr));
    rd_kafka_metadata_destroy(md);
    if (txn_id) {
        char e[512];
        if (!txn_ok(rd_kafka_init_transactions(rk, 60000), "init_transactions", e, sizeof e)) die("%s", e);
        if (!txn_ok(rd_kafka_begin_transaction(rk), "begin_transaction", e, sizeof e)) die("%s", e);
    }

    rng_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    char *buf = malloc(size ? size : 1);
    if (!buf) die("out of memory");
    letters(buf, size);

    char send_error[600] = "";
    uint64_t transactions = 0;
    double commit_total = 0, commit_max = 0;
    double start = now_secs(), txn_started = start, txn_secs = (double)txn_ms / 1000.0;
    for (uint64_t i = 0; i < n; i++) {
        if (txn_id && now_secs() - txn_started >= txn_secs) {
            double t = now_secs();
            /* commit_transaction flushes (serving delivery reports) and commits. */
            if (!txn_ok(rd_kafka_commit_transaction(rk, -1), "commit_transaction", send_error, sizeof send_error))
                break;
            double d = now_secs() - t;
            commit_total += d;
            if (d > commit_max) commit_max = d;
            transactions++;
            if (!txn_ok(rd_kafka_begin_transaction(rk), "begin_transaction", send_error, sizeof send_error))
                break;
            txn_started = now_secs();
        }
        /* As ProducerPerformance: refill the one payload buffer; librdkafka copies it into the
         * message (RD_KAFKA_MSG_F_COPY). fixed: the same bytes every time. */
        if (fresh) letters(buf, size);
        while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, buf, size, NULL, 0,
                                NULL) == -1) {
            rd_kafka_resp_err_t e = rd_kafka_last_error();
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                snprintf(send_error, sizeof send_error, "produce: %s", rd_kafka_err2str(e));
                goto sent;
            }
            rd_kafka_poll(rk, 1);
        }
        rd_kafka_poll(rk, 0);
    }
sent:
    if (txn_id && !send_error[0]) {
        double t = now_secs();
        if (txn_ok(rd_kafka_commit_transaction(rk, -1), "commit_transaction", send_error, sizeof send_error)) {
            double d = now_secs() - t;
            commit_total += d;
            if (d > commit_max) commit_max = d;
            transactions++;
        }
    }
    rd_kafka_resp_err_t ferr = rd_kafka_flush(rk, 300000);
    if (ferr && !send_error[0]) snprintf(send_error, sizeof send_error, "flush: %s", rd_kafka_err2str(ferr));
    double secs = now_secs() - start;
    if (txn_id)
        printf("librdkafka-detail transactions=%" PRIu64 " commit_ms_total=%.1f commit_ms_avg=%.2f "
               "commit_ms_max=%.1f\n",
               transactions, commit_total * 1000, commit_total * 1000 / (double)(transactions ? transactions : 1),
               commit_max * 1000);
    printf("librdkafka-detail elapsed_sec=%.3f failed=%" PRIu64 "\n", secs, failed);
    print_final(acked, secs, acked * (uint64_t)size);
    if (failed) fprintf(stderr, "rdkafka-perf produce: %" PRIu64 " record(s) failed, first error: %s\n", failed, first_error);
    if (send_error[0]) fprintf(stderr, "rdkafka-perf produce: %s\n", send_error);
    free(buf);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    if (acked < n) {
        fprintf(stderr, "rdkafka-perf produce: error: only %" PRIu64 " of %" PRIu64 " records were acknowledged (%" PRIu64 " failed)\n",
                acked, n, failed);
        return 1;
    }
    return 0;
}

/* --------------------------------------------------------------------------------------------
 * consume */

static int consume(void) {
    const char *bootstrap = opt("bootstrap", "127.0.0.1:9092");
    const char *topic = req("topic");
    uint64_t n = (uint64_t)opt_num("num-records", 0);
    if (n == 0) usage_error("--num-records > 0 is required");
    const char *iso = opt("isolation", "read_uncommitted");
    if (strcmp(iso, "read_committed") != 0 && strcmp(iso, "read_uncommitted") != 0)
        usage_error("--isolation %s: expected read_committed or read_uncommitted", iso);
    long long timeout_ms = opt_num("timeout-ms", 30000);

    /* No group join: group.id is only there because librdkafka's high-level consumer requires
     * one; the partitions are assigned, never subscribed, and nothing is committed. Fetch
     * settings are librdkafka's defaults (fetch.max.bytes 50 MiB, max.partition.fetch.bytes
     * 1 MiB, fetch.min.bytes 1, fetch.wait.max.ms 500, queued.min.messages 100000,
     * queued.max.messages.kbytes 64 MiB for the consumer queue). */
    char group[128];
    snprintf(group, sizeof group, "rdkafka-perf-%ld-%ld", (long)getpid(), (long)time(NULL));
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "group.id", group);
    set(conf, "isolation.level", iso);
    set(conf, "enable.auto.commit", "false");
    set(conf, "enable.auto.offset.store", "false");
    set(conf, "enable.partition.eof", "false");
    set(conf, "auto.offset.reset", "earliest");
    const char *tls = set_tls(conf);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    printf("rdkafka-perf consume: librdkafka=%s topic=%s records=%" PRIu64
           " isolation=%s tls=%s (assign, no group join; librdkafka fetch defaults)\n",
           rd_kafka_version_str(), topic, n, iso, tls);
    fflush(stdout);

    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) die("rd_kafka_new: %s", err);
    rd_kafka_poll_set_consumer(rk);
    /* Connect first (brokers only, no topic), as onceflow-perf's Consumer::new does before its
     * clock starts. */
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t merr = rd_kafka_metadata(rk, 0, NULL, &md, 30000);
    if (merr) die("metadata: %s", rd_kafka_err2str(merr));
    rd_kafka_metadata_destroy(md);

    double start = now_secs();
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    merr = rd_kafka_metadata(rk, 0, rkt, &md, 30000);
    if (merr) die("metadata of %s: %s", topic, rd_kafka_err2str(merr));
    if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0)
        die("topic %s: %s", topic,
            md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "not in the metadata");
    int parts = md->topics[0].partition_cnt;
    rd_kafka_topic_partition_list_t *tps = rd_kafka_topic_partition_list_new(parts);
    for (int p = 0; p < parts; p++)
        rd_kafka_topic_partition_list_add(tps, topic, md->topics[0].partitions[p].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_resp_err_t aerr = rd_kafka_assign(rk, tps);
    rd_kafka_topic_partition_list_destroy(tps);
    if (aerr) die("assign: %s", rd_kafka_err2str(aerr));

    uint64_t records = 0, bytes = 0;
    double first_record = -1, last_data = now_secs();
    int status = 0;
    while (records < n) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m) {
            if ((now_secs() - last_data) * 1000 >= (double)timeout_ms) {
                fprintf(stderr, "rdkafka-perf consume: no records for %lld ms, stopping\n", timeout_ms);
                break;
            }
            continue;
        }
        if (m->err) {
            /* Consumer errors are mostly informational (librdkafka retries); a fatal one ends
             * the run. */
            char fatal[256];
            if (rd_kafka_fatal_error(rk, fatal, sizeof fatal)) {
                fprintf(stderr, "rdkafka-perf consume: fatal: %s\n", fatal);
                rd_kafka_message_destroy(m);
                status = 1;
                break;
            }
            fprintf(stderr, "rdkafka-perf consume: warning: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        if (first_record < 0) first_record = now_secs() - start;
        last_data = now_secs();
        records++;
        bytes += m->key_len + m->len;
        rd_kafka_message_destroy(m);
    }
    double secs = now_secs() - start;
    printf("librdkafka-detail partitions=%d first_record_ms=%.1f mb=%.4f\n", parts, first_record * 1000, mib(bytes));
    print_final(records, secs, bytes);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (status) return status;
    if (records < n) {
        fprintf(stderr, "rdkafka-perf consume: error: consumed %" PRIu64 " of %" PRIu64 " requested records\n", records, n);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "produce") == 0) {
        static const char *const allowed[] = {
            "bootstrap", "topic", "num-records", "record-size", "payload", "acks", "linger-ms",
            "batch-size", "compression", "idempotence", "max-buffered-records",
            "max-buffered-kbytes", "transactional-id", "transaction-duration-ms",
            "report-interval-ms", "tls-ca", NULL};
        parse_opts(argc - 2, argv + 2, allowed);
        return produce();
    }
    if (strcmp(cmd, "consume") == 0) {
        static const char *const allowed[] = {"bootstrap", "topic", "num-records", "isolation", "timeout-ms",
                                              "tls-ca", NULL};
        parse_opts(argc - 2, argv + 2, allowed);
        return consume();
    }
    usage_error("unknown command '%s'", cmd);
    return 2;
}
