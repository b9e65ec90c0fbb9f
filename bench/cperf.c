/* A small librdkafka load generator for the benchmarks, in the manner of librdkafka's
 * rdkafka_performance: produce COUNT records of SIZE bytes to partition 0 of TOPIC, or read COUNT
 * records of partition 0 from the beginning.
 *
 *   cperf produce BOOTSTRAP TOPIC COUNT SIZE ACKS [name=value ...]
 *   cperf consume BOOTSTRAP TOPIC COUNT [name=value ...]
 *
 * It prints one line: "records=N errors=E seconds=S" (S from the first record handed to librdkafka
 * until the last delivery report; for the consumer, from the first record received until the last,
 * as rdkafka_performance counts, with "startup=" the time before the first record; the consumer adds
 * "first_at=" and "last_at=", the CLOCK_MONOTONIC times of its first and last record, which
 * Python's time.monotonic() reads on Linux).
 *
 * Two more modes measure latency, each meant to run in a process of its own:
 *
 *   cperf paced BOOTSTRAP TOPIC COUNT SIZE ACKS RATE [name=value ...]
 *   cperf follow BOOTSTRAP TOPIC PARTITIONS COUNT [name=value ...]
 *
 * "paced" produces COUNT records to every partition of TOPIC (librdkafka's partitioner) at RATE
 * records/s (0: as fast as it can), each value starting with the CLOCK_MONOTONIC time it was handed
 * over, and adds to its line the records delivered to each partition ("partitions=N0,N1,...") and
 * the delivery latency (handed over until its delivery report) as "p50= p99= p999= max=" in ms, of
 * the records handed over after the warm-up. "follow" reads
 * partitions 0..PARTITIONS-1 from the beginning until it has COUNT records and adds the end-to-end
 * latency of each record produced after the warm-up (handed to the producer until received, one
 * clock for the whole machine) in the same form.
 *
 * The name=value pairs are librdkafka's configuration, except these of cperf's own:
 *   cperf.partition=N   the partition "consume" reads (default 0);
 *   cperf.warmup=S      "paced": the records of the first S seconds are sent, and marked (the byte
 *                       after the time is 1), but not measured, by "paced" or by "follow";
 *   cperf.stats=FILE    librdkafka's statistics, every second (or statistics.interval.ms), appended to
 *                       FILE (one JSON a line);
 *   cperf.timeline=FILE "paced" and "follow": for each 100 ms after the first measured record, the
 *                       records measured and their largest latency, written to FILE at the end
 *                       ("MS COUNT MAX_MS" a line): whether a tail is a few stalls or a backlog.
 *
 * bench/peers.py builds it against the librdkafka that the confluent-kafka wheel bundles, which ships
 * without headers: the declarations below are those of librdkafka's public rdkafka.h (a stable ABI)
 * that this program uses. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef int rd_kafka_resp_err_t;
typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

enum { RD_KAFKA_PRODUCER = 0, RD_KAFKA_CONSUMER = 1 };
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_MSG_F_COPY 0x2
#define RD_KAFKA_OFFSET_BEGINNING (-2)
#define RD_KAFKA_PARTITION_UA (-1)
#define RD_KAFKA_RESP_ERR__PARTITION_EOF (-191)
#define RD_KAFKA_RESP_ERR__QUEUE_FULL (-184)

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t size);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *conf,
                                 void (*cb)(rd_kafka_t *, const rd_kafka_message_t *, void *));
void rd_kafka_conf_set_stats_cb(rd_kafka_conf_t *conf, int (*cb)(rd_kafka_t *, char *, size_t, void *));
rd_kafka_t *rd_kafka_new(int type, rd_kafka_conf_t *conf, char *errstr, size_t size);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, rd_kafka_topic_conf_t *conf);
int rd_kafka_produce(rd_kafka_topic_t *rkt, int32_t partition, int msgflags, void *payload, size_t len,
                     const void *key, size_t keylen, void *opaque);
int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_flush(rd_kafka_t *rk, int timeout_ms);
rd_kafka_resp_err_t rd_kafka_last_error(void);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
int rd_kafka_consume_start(rd_kafka_topic_t *rkt, int32_t partition, int64_t offset);
ssize_t rd_kafka_consume_batch(rd_kafka_topic_t *rkt, int32_t partition, int timeout_ms,
                               rd_kafka_message_t **messages, size_t size);
int rd_kafka_consume_stop(rd_kafka_topic_t *rkt, int32_t partition);
rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk);
void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu);
int rd_kafka_consume_start_queue(rd_kafka_topic_t *rkt, int32_t partition, int64_t offset,
                                 rd_kafka_queue_t *rkqu);
ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms, rd_kafka_message_t **messages,
                                     size_t size);
void rd_kafka_message_destroy(rd_kafka_message_t *message);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
void rd_kafka_destroy(rd_kafka_t *rk);

static long delivered, failed;
static double last_delivery;

/* cperf's own settings (cperf.NAME=VALUE) */
static int32_t opt_partition;
static double opt_warmup;
static const char *opt_stats;
static const char *opt_timeline;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char errstr[512];
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "cperf: %s=%s: %s\n", name, value, errstr);
        exit(2);
    }
}

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)opaque;
    FILE *out = fopen(opt_stats, "a");
    if (out != NULL) {
        fwrite(json, 1, len, out);
        fputc('\n', out);
        fclose(out);
    }
    return 0; /* librdkafka frees json */
}

static void extra(rd_kafka_conf_t *conf, int argc, char **argv, int first) {
    int interval_given = 0;
    for (int i = first; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "cperf: %s is not name=value\n", argv[i]);
            exit(2);
        }
        *eq = '\0';
        if (strcmp(argv[i], "cperf.partition") == 0)
            opt_partition = atoi(eq + 1);
        else if (strcmp(argv[i], "cperf.warmup") == 0)
            opt_warmup = atof(eq + 1);
        else if (strcmp(argv[i], "cperf.stats") == 0)
            opt_stats = eq + 1;
        else if (strcmp(argv[i], "cperf.timeline") == 0)
            opt_timeline = eq + 1;
        else {
            interval_given |= strcmp(argv[i], "statistics.interval.ms") == 0;
            set(conf, argv[i], eq + 1);
        }
    }
    if (opt_stats != NULL) {
        if (!interval_given)
            set(conf, "statistics.interval.ms", "1000");
        rd_kafka_conf_set_stats_cb(conf, on_stats);
    }
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    if (msg->err) {
        if (failed++ == 0)
            fprintf(stderr, "cperf: delivery failed: %s\n", rd_kafka_err2str(msg->err));
    } else {
        delivered++;
    }
    last_delivery = now();
}

static int produce(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: cperf produce BOOTSTRAP TOPIC COUNT SIZE ACKS [name=value ...]\n");
        return 2;
    }
    long count = atol(argv[4]);
    size_t size = (size_t)atol(argv[5]);
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[2]);
    set(conf, "acks", argv[6]);
    set(conf, "linger.ms", "5");
    set(conf, "queue.buffering.max.messages", "1000000");
    extra(conf, argc, argv, 7);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "cperf: %s\n", errstr);
        return 2;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[3], NULL);
    char *payload = malloc(size ? size : 1);
    memset(payload, 'x', size);
    double started = now();
    for (long i = 0; i < count; i++) {
        while (rd_kafka_produce(rkt, 0, RD_KAFKA_MSG_F_COPY, payload, size, NULL, 0, NULL) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "cperf: produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
                return 1;
            }
            rd_kafka_poll(rk, 1);
        }
        if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 600000);
    printf("records=%ld errors=%ld seconds=%.6f\n", delivered, failed + (count - delivered - failed),
           last_delivery - started);
    free(payload);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return failed || delivered != count;
}

static int consume(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: cperf consume BOOTSTRAP TOPIC COUNT [name=value ...]\n");
        return 2;
    }
    long count = atol(argv[4]);
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[2]);
    set(conf, "enable.partition.eof", "true");
    extra(conf, argc, argv, 5);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "cperf: %s\n", errstr);
        return 2;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[3], NULL);
    double started = now();
    if (rd_kafka_consume_start(rkt, opt_partition, RD_KAFKA_OFFSET_BEGINNING) == -1) {
        fprintf(stderr, "cperf: consume_start: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
        return 1;
    }
    static rd_kafka_message_t *batch[10000];
    long got = 0, errors = 0;
    double first = 0, deadline = started + 600;
    while (got < count && now() < deadline) {
        /* at most what is left: a batch call waits (until its timeout, or the partition's EOF after
         * the broker held an empty fetch for fetch.wait.max.ms) for as many as it asked for, and the
         * wait would count as reading time */
        size_t want = count - got < 10000 ? (size_t)(count - got) : 10000;
        ssize_t n = rd_kafka_consume_batch(rkt, opt_partition, 1000, batch, want);
        for (ssize_t i = 0; i < n; i++) {
            if (batch[i]->err == 0) {
                if (got++ == 0)
                    first = now();
            } else if (batch[i]->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && errors++ == 0)
                fprintf(stderr, "cperf: consume: %s\n", rd_kafka_err2str(batch[i]->err));
            rd_kafka_message_destroy(batch[i]);
        }
        if (opt_stats != NULL)
            rd_kafka_poll(rk, 0); /* serves the statistics callback */
    }
    double last = now();
    printf("records=%ld errors=%ld seconds=%.6f startup=%.6f first_at=%.6f last_at=%.6f\n", got, errors,
           last - first, first - started, first, last);
    rd_kafka_consume_stop(rkt, opt_partition);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return got != count;
}

/* The latencies measured so far, in ms. */
static double *latencies;
static long measured;

/* cperf.timeline: per 100 ms window (of the time a measured record was received or delivered), from
 * the first measured record, the records measured and their largest latency */
#define WINDOWS 20000
static long window_count[WINDOWS];
static double window_max[WINDOWS];
static uint64_t windows_from;
static int windows_used;

static void measure(uint64_t at_ns, double ms) {
    latencies[measured++] = ms;
    if (opt_timeline == NULL)
        return;
    if (windows_from == 0)
        windows_from = at_ns;
    long w = (long)((at_ns - windows_from) / 100000000u);
    if (w >= WINDOWS)
        w = WINDOWS - 1;
    window_count[w]++;
    if (ms > window_max[w])
        window_max[w] = ms;
    if (w >= windows_used)
        windows_used = (int)w + 1;
}

static void write_timeline(void) {
    if (opt_timeline == NULL)
        return;
    FILE *out = fopen(opt_timeline, "w");
    if (out == NULL) {
        perror(opt_timeline);
        return;
    }
    for (int w = 0; w < windows_used; w++)
        fprintf(out, "%d %ld %.3f\n", w * 100, window_count[w], window_max[w]);
    fclose(out);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_percentiles(void) {
    if (measured == 0) {
        printf(" p50=0 p99=0 p999=0 max=0\n");
        return;
    }
    qsort(latencies, (size_t)measured, sizeof *latencies, by_value);
#define AT(q) latencies[(long)((q) * (measured - 1))]
    printf(" p50=%.3f p99=%.3f p999=%.3f max=%.3f\n", AT(0.5), AT(0.99), AT(0.999), latencies[measured - 1]);
#undef AT
}

/* A paced record's value: the time it was handed over (8 bytes), then 1 if it is a warm-up record. */
#define STAMP_SIZE 9

/* Records delivered to each partition (of the first MAX_PARTITIONS). */
#define MAX_PARTITIONS 64
static long delivered_to[MAX_PARTITIONS];
static int partitions_seen;

static void on_paced_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    on_delivery(rk, msg, opaque);
    if (msg->err == 0 && msg->partition >= 0 && msg->partition < MAX_PARTITIONS) {
        delivered_to[msg->partition]++;
        if (msg->partition >= partitions_seen)
            partitions_seen = msg->partition + 1;
    }
    /* the opaque is the time it was handed over, with the lowest bit set for a warm-up record */
    uint64_t handed = (uint64_t)(uintptr_t)msg->_private;
    if (msg->err == 0 && !(handed & 1)) {
        uint64_t at = now_ns();
        measure(at, (double)(at - handed) / 1e6);
    }
}

static int paced(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: cperf paced BOOTSTRAP TOPIC COUNT SIZE ACKS RATE [name=value ...]\n");
        return 2;
    }
    long count = atol(argv[4]);
    size_t size = (size_t)atol(argv[5]);
    double rate = atof(argv[7]);
    if (size < STAMP_SIZE)
        size = STAMP_SIZE;
    latencies = malloc(sizeof *latencies * (size_t)(count ? count : 1));
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[2]);
    set(conf, "acks", argv[6]);
    set(conf, "linger.ms", "5");
    set(conf, "queue.buffering.max.messages", "1000000");
    extra(conf, argc, argv, 8);
    rd_kafka_conf_set_dr_msg_cb(conf, on_paced_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "cperf: %s\n", errstr);
        return 2;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[3], NULL);
    char *payload = malloc(size);
    memset(payload, 'x', size);
    double started = now(), measured_from = started + opt_warmup;
    struct timespec pause = {0, 200000};
    for (long i = 0; i < count; i++) {
        if (rate > 0) {
            while ((double)i >= (now() - started) * rate) {
                rd_kafka_poll(rk, 0);
                nanosleep(&pause, NULL);
            }
        }
        int warmup = now() < measured_from;
        uint64_t handed = now_ns() & ~(uint64_t)1;
        memcpy(payload, &handed, sizeof handed);
        payload[8] = (char)warmup;
        while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, payload, size, NULL, 0,
                                (void *)(uintptr_t)(handed | (uint64_t)warmup)) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "cperf: produce: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
                return 1;
            }
            rd_kafka_poll(rk, 1);
        }
        if ((i & 1023) == 0)
            rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 600000);
    printf("records=%ld errors=%ld seconds=%.6f measured=%ld partitions=", delivered,
           failed + (count - delivered - failed), last_delivery - started, measured);
    for (int p = 0; p < partitions_seen; p++)
        printf(p ? ",%ld" : "%ld", delivered_to[p]);
    print_percentiles();
    write_timeline();
    free(payload);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return failed || delivered != count;
}

static int follow(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: cperf follow BOOTSTRAP TOPIC PARTITIONS COUNT [name=value ...]\n");
        return 2;
    }
    int partitions = atoi(argv[4]);
    long count = atol(argv[5]);
    latencies = malloc(sizeof *latencies * (size_t)(count ? count : 1));
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[2]);
    extra(conf, argc, argv, 6);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        fprintf(stderr, "cperf: %s\n", errstr);
        return 2;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[3], NULL);
    rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
    for (int p = 0; p < partitions; p++) {
        if (rd_kafka_consume_start_queue(rkt, p, RD_KAFKA_OFFSET_BEGINNING, queue) == -1) {
            fprintf(stderr, "cperf: consume_start: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 1;
        }
    }
    static rd_kafka_message_t *batch[10000];
    long got = 0, errors = 0;
    double first = 0, started = now(), deadline = started + 600;
    while (got < count && now() < deadline) {
        /* a batch call waits until it has all it asked for or its timeout: wait for one record,
         * then take what else is already there without waiting */
        ssize_t n = rd_kafka_consume_batch_queue(queue, 1000, batch, 1);
        if (n == 1) {
            ssize_t more = rd_kafka_consume_batch_queue(queue, 0, batch + 1, 9999);
            if (more > 0)
                n += more;
        }
        uint64_t received = now_ns();
        for (ssize_t i = 0; i < n; i++) {
            if (batch[i]->err == 0 && batch[i]->len >= STAMP_SIZE) {
                const char *value = batch[i]->payload;
                uint64_t handed;
                memcpy(&handed, value, sizeof handed);
                if (got++ == 0)
                    first = now();
                if (!value[8])
                    measure(received, (double)(received - handed) / 1e6);
            } else if (batch[i]->err != 0 && errors++ == 0) {
                fprintf(stderr, "cperf: consume: %s\n", rd_kafka_err2str(batch[i]->err));
            }
            rd_kafka_message_destroy(batch[i]);
        }
        if (opt_stats != NULL)
            rd_kafka_poll(rk, 0);
    }
    printf("records=%ld errors=%ld seconds=%.6f startup=%.6f measured=%ld", got, errors, now() - first,
           first - started, measured);
    print_percentiles();
    write_timeline();
    for (int p = 0; p < partitions; p++)
        rd_kafka_consume_stop(rkt, p);
    rd_kafka_queue_destroy(queue);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return got != count;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "produce") == 0)
        return produce(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "consume") == 0)
        return consume(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "paced") == 0)
        return paced(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "follow") == 0)
        return follow(argc, argv);
    fprintf(stderr, "usage: cperf produce|consume|paced|follow BOOTSTRAP TOPIC ...\n");
    return 2;
}
