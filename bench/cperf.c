/* A small librdkafka load generator for the benchmarks, in the manner of librdkafka's
 * rdkafka_performance: produce COUNT records of SIZE bytes to partition 0 of TOPIC, or read COUNT
 * records of partition 0 from the beginning.
 *
 *   cperf produce BOOTSTRAP TOPIC COUNT SIZE ACKS [name=value ...]
 *   cperf consume BOOTSTRAP TOPIC COUNT [name=value ...]
 *
 * It prints one line: "records=N errors=E seconds=S" (S from the first record handed to librdkafka
 * until the last delivery report; for the consumer, from the first record received until the last,
 * as rdkafka_performance counts, with "startup=" the time before the first record).
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
#define RD_KAFKA_RESP_ERR__PARTITION_EOF (-191)
#define RD_KAFKA_RESP_ERR__QUEUE_FULL (-184)

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t size);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *conf,
                                 void (*cb)(rd_kafka_t *, const rd_kafka_message_t *, void *));
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
void rd_kafka_message_destroy(rd_kafka_message_t *message);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
void rd_kafka_destroy(rd_kafka_t *rk);

static long delivered, failed;
static double last_delivery;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char errstr[512];
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "cperf: %s=%s: %s\n", name, value, errstr);
        exit(2);
    }
}

static void extra(rd_kafka_conf_t *conf, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "cperf: %s is not name=value\n", argv[i]);
            exit(2);
        }
        *eq = '\0';
        set(conf, argv[i], eq + 1);
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
    if (rd_kafka_consume_start(rkt, 0, RD_KAFKA_OFFSET_BEGINNING) == -1) {
        fprintf(stderr, "cperf: consume_start: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
        return 1;
    }
    static rd_kafka_message_t *batch[10000];
    long got = 0, errors = 0;
    double first = 0, deadline = started + 600;
    while (got < count && now() < deadline) {
        ssize_t n = rd_kafka_consume_batch(rkt, 0, 1000, batch, 10000);
        for (ssize_t i = 0; i < n; i++) {
            if (batch[i]->err == 0) {
                if (got++ == 0)
                    first = now();
            } else if (batch[i]->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && errors++ == 0)
                fprintf(stderr, "cperf: consume: %s\n", rd_kafka_err2str(batch[i]->err));
            rd_kafka_message_destroy(batch[i]);
        }
    }
    double last = now();
    printf("records=%ld errors=%ld seconds=%.6f startup=%.6f\n", got, errors, last - first, first - started);
    rd_kafka_consume_stop(rkt, 0);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return got != count;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "produce") == 0)
        return produce(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "consume") == 0)
        return consume(argc, argv);
    fprintf(stderr, "usage: cperf produce|consume BOOTSTRAP TOPIC COUNT ...\n");
    return 2;
}
