/*
 * kraftpy.protocol._record_scan: one pass over the records section of a RecordBatch, at C speed.
 *
 * The broker checks every record of every produced batch (kraftpy.protocol.record_validation),
 * and a loop over varints in Python costs about a microsecond a record, a hundred times the CRC
 * of the same bytes. This module does that loop in C and nothing else: it builds no object per
 * record and returns no reason. When it says no, the Python decoder
 * (kraftpy.protocol.records._decode_records) runs over the same bytes and says why.
 *
 * scan(buffer, start, count) -> (min_timestamp_delta, max_timestamp_delta, null_keys) or None
 *
 * reads ``count`` records from ``buffer[start:]``, in the layout of kraftpy/protocol/records.py:
 *
 *     length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
 *     key_length varint (-1: null), key, value_length varint (-1: null), value,
 *     header_count varint, then per header: key_length varint (>= 0), key (UTF-8),
 *     value_length varint (-1: null), value
 *
 * and answers None unless it accepts exactly what _decode_records accepts — every length within
 * its record, every record exactly as long as it says, the buffer ending with the last record,
 * varints no longer than their kind allows and within its range, header keys valid UTF-8 — and,
 * on top of that, the offset deltas are 0, 1, 2, ... in order. Otherwise it answers the smallest
 * and largest timestamp delta and how many records have a null key.
 *
 * Pure: it reads the buffer and touches nothing else. tests/protocol/test_record_validation.py
 * checks that it agrees with the Python decoder on valid and damaged batches.
 *
 * The log cleaner (kraftpy.storage.cleaner, kraftpy.storage.offset_map) reads every record of a
 * compacted log twice, and its per-record loops live here too, over the same record layout:
 *
 * map_records(table, key0, key1, entries, max_entries, buffer, start, count, base_offset, min_offset)
 *     -> (entries, records taken, offset of the last record put or -1, where it stopped) or None
 *
 *     puts ``key hash -> offset`` for every record at or after ``min_offset`` that has a key into
 *     ``table`` (a writable buffer of 24-byte slots, a power of two of them: hash 16 bytes, then
 *     offset + 1 as a native int64, 0 for an empty slot), until the map holds ``max_entries`` keys
 *     and a record brings a new one: it stops before that record (and says where it starts).
 *
 * map_batches(table, key0, key1, entries, max_entries, buffer, start, min_offset, latest)
 *     -> (entries, position, latest, offset of the last record put or -1, state) or None
 *
 *     map_records over every whole batch of ``buffer`` from ``start`` (a read of a segment): the
 *     records at or after ``min_offset`` of uncompressed data batches; ``latest`` grows to the last
 *     offset of each batch reaching ``min_offset``. It stops at the end of the whole batches
 *     (state 0: ``position`` is where the next read starts), before a compressed batch reaching
 *     ``min_offset`` (state 1: the caller decompresses and maps it), or in a batch when the map
 *     holds ``max_entries`` keys (state 2: ``position`` is that batch's start). None: a batch
 *     header or record does not parse.
 *
 * grow_table(old, new)
 *
 *     puts every entry of the table ``old`` into the empty, larger table ``new``.
 *
 * filter_records(table, key0, key1, buffer, start, count, base_offset, latest_offset, retain_tombstones)
 *     -> (mask, kept, kept tombstones, smallest and largest kept timestamp delta, keyless) or None
 *
 *     decides which records a cleaned batch keeps (Kafka's Cleaner.shouldRetainRecord): every record
 *     after ``latest_offset``; otherwise a record with a key whose offset is the map's for that key
 *     (or the key is not in the map), a tombstone (null value) only with ``retain_tombstones``.
 *     ``mask`` holds one byte per record, 1 to keep it.
 *
 * rewrite_records(buffer, start, count, mask, timestamp_shift) -> bytes
 *
 *     the records ``mask`` keeps, back to back, each with ``timestamp_shift`` added to its
 *     timestamp delta (the batch's base timestamp moved); the other fields as they were.
 *
 * Key hashes are SipHash-1-3 with a 128-bit output, keyed by (key0, key1): a fresh random key per
 * map, so nobody can choose keys that collide (a collision could drop a key's latest record).
 * Records are taken GROUP at a time: first parsed and hashed, their slots' cache lines fetched
 * ahead, then looked up, so that the table's cache misses overlap instead of adding up.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Read the zig-zag varint of ``bits`` (32 or 64) at *pos, not past ``end``. Returns 0 and moves
 * *pos past it, or -1 when the buffer ends inside it, it is longer than 5 (10) bytes, or its value
 * does not fit its kind. A non-minimal encoding is accepted, as Kafka and varint.py accept it. */
static inline int
read_zigzag(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int bits, int64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t raw;
    /* One and two bytes are most lengths and deltas: no loop for them. */
    if (p < end && buf[p] < 0x80) {
        raw = buf[p];
        p += 1;
    } else if (p + 1 < end && buf[p + 1] < 0x80) {
        raw = (uint64_t)(buf[p] & 0x7F) | ((uint64_t)buf[p + 1] << 7);
        p += 2;
    } else {
        const int max_bytes = bits == 32 ? 5 : 10;
        int shift = 0;
        int taken = 0;
        raw = 0;
        for (;;) {
            if (taken == max_bytes || p >= end)
                return -1;
            uint8_t byte = buf[p++];
            taken += 1;
            if (shift == 63 && (byte & 0x7F) > 1)
                return -1;  /* a tenth byte carrying bits past the 64th */
            raw |= (uint64_t)(byte & 0x7F) << shift;
            if (byte < 0x80)
                break;
            shift += 7;
        }
        if (bits == 32 && (raw >> 32) != 0)
            return -1;
    }
    *out = (int64_t)((raw >> 1) ^ (0 - (raw & 1)));
    *pos = p;
    return 0;
}

#define READ(cursor, bits, target) \
    do { if (read_zigzag(buf, end, &(cursor), (bits), &(target)) != 0) goto refused; } while (0)

/* Read a key, value or header value length at *p and step over the bytes; -1 (null) is allowed. */
#define SKIP_NULLABLE(p, n, on_null) \
    do { \
        READ(p, 32, n); \
        if (n < 0) { \
            if (n != -1) \
                goto refused; \
            on_null; \
        } else { \
            if (n > record_end - (p)) \
                goto refused; \
            (p) += (Py_ssize_t)(n); \
        } \
    } while (0)

static PyObject *
scan(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t start, count;
    if (!PyArg_ParseTuple(args, "y*nn:scan", &view, &start, &count))
        return NULL;
    if (start < 0 || start > view.len || count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start must lie in the buffer and count must not be negative");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = start;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    Py_ssize_t null_keys = 0;

    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, timestamp_delta, offset_delta, n, header_count;
        READ(pos, 32, length);
        if (length < 0 || length > end - pos)
            goto refused;
        const Py_ssize_t record_end = pos + (Py_ssize_t)length;
        /* The fields are read with a cursor of their own, and the next record starts where this
         * one's length says (once the fields are seen to end there): the processor reads the next
         * length without waiting for this record's fields. */
        Py_ssize_t p = pos + 1;  /* after the attributes: unused */
        READ(p, 64, timestamp_delta);
        if (timestamp_delta < min_ts)
            min_ts = timestamp_delta;
        if (timestamp_delta > max_ts)
            max_ts = timestamp_delta;
        READ(p, 32, offset_delta);
        if (offset_delta != i)
            goto refused;
        SKIP_NULLABLE(p, n, null_keys += 1);  /* key */
        SKIP_NULLABLE(p, n, (void)0);  /* value */
        READ(p, 32, header_count);
        if (header_count != 0) {
            if (header_count < 0 || header_count > record_end - p)
                goto refused;
            for (int64_t h = 0; h < header_count; h++) {
                READ(p, 32, n);  /* header key: never null, UTF-8 */
                if (n < 0 || n > record_end - p)
                    goto refused;
                PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)n, "strict");
                if (key == NULL) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                        PyBuffer_Release(&view);
                        return NULL;  /* out of memory: not an answer about the records */
                    }
                    PyErr_Clear();
                    goto refused;
                }
                Py_DECREF(key);
                p += (Py_ssize_t)n;
                SKIP_NULLABLE(p, n, (void)0);  /* header value */
            }
        }
        if (p != record_end)
            goto refused;
        pos = record_end;
    }
    if (pos != end)
        goto refused;
    PyBuffer_Release(&view);
    if (count == 0)
        min_ts = max_ts = 0;
    return Py_BuildValue("(LLn)", (long long)min_ts, (long long)max_ts, null_keys);

refused:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* -- the log cleaner ---------------------------------------------------------------------- */

/* One record's fields, as positions in the buffer. */
typedef struct {
    Py_ssize_t start, end;        /* the whole record, its length varint included */
    Py_ssize_t attributes;        /* the attributes byte, after the length varint */
    Py_ssize_t after_timestamp;   /* just after the timestamp delta */
    int64_t timestamp_delta, offset_delta;
    Py_ssize_t key, key_length;   /* key_length -1: null */
    int64_t value_length;         /* -1: null */
} record_t;

/* Parse the record at *pos (not past ``end``) into *r and move *pos past it; -1 when it does not
 * parse. Header keys are not checked for UTF-8 here: the records were checked when produced. */
static int
parse_record(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, record_t *r)
{
    int64_t length, n, header_count;
    Py_ssize_t p = *pos;
    r->start = p;
    if (read_zigzag(buf, end, &p, 32, &length) != 0 || length < 1 || length > end - p)
        return -1;
    const Py_ssize_t record_end = p + (Py_ssize_t)length;
    r->attributes = p;
    p += 1;
    if (read_zigzag(buf, record_end, &p, 64, &r->timestamp_delta) != 0)
        return -1;
    r->after_timestamp = p;
    if (read_zigzag(buf, record_end, &p, 32, &r->offset_delta) != 0)
        return -1;
    if (read_zigzag(buf, record_end, &p, 32, &n) != 0 || n < -1 || n > record_end - p)
        return -1;
    r->key = p;
    r->key_length = (Py_ssize_t)n;
    if (n > 0)
        p += (Py_ssize_t)n;
    if (read_zigzag(buf, record_end, &p, 32, &n) != 0 || n < -1 || n > record_end - p)
        return -1;
    r->value_length = n;
    if (n > 0)
        p += (Py_ssize_t)n;
    if (read_zigzag(buf, record_end, &p, 32, &header_count) != 0 || header_count < 0
            || header_count > record_end - p)
        return -1;
    for (int64_t h = 0; h < header_count; h++) {
        if (read_zigzag(buf, record_end, &p, 32, &n) != 0 || n < 0 || n > record_end - p)
            return -1;
        p += (Py_ssize_t)n;
        if (read_zigzag(buf, record_end, &p, 32, &n) != 0 || n < -1 || n > record_end - p)
            return -1;
        if (n > 0)
            p += (Py_ssize_t)n;
    }
    if (p != record_end)
        return -1;
    r->end = record_end;
    *pos = record_end;
    return 0;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND \
    do { \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
    } while (0)

static inline uint64_t
load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24)
        | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

/* SipHash-1-3 with a 128-bit output (Aumasson and Bernstein's algorithm with the rounds CPython's
 * str hash uses: one per 8 bytes, three to finish). */
static void
siphash128(const uint8_t *in, Py_ssize_t length, uint64_t k0, uint64_t k1, uint64_t out[2])
{
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
    uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
    uint64_t v3 = 0x7465646279746573ULL ^ k1;
    v1 ^= 0xee;
    const Py_ssize_t whole = length - (length % 8);
    for (Py_ssize_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le64(in + i);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = ((uint64_t)length) << 56;
    const uint8_t *tail = in + whole;
    switch (length & 7) {
    case 7: b |= ((uint64_t)tail[6]) << 48; /* fall through */
    case 6: b |= ((uint64_t)tail[5]) << 40; /* fall through */
    case 5: b |= ((uint64_t)tail[4]) << 32; /* fall through */
    case 4: b |= ((uint64_t)tail[3]) << 24; /* fall through */
    case 3: b |= ((uint64_t)tail[2]) << 16; /* fall through */
    case 2: b |= ((uint64_t)tail[1]) << 8;  /* fall through */
    case 1: b |= ((uint64_t)tail[0]); break;
    case 0: break;
    }
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

typedef struct {
    uint64_t h0, h1;
    int64_t offset_plus_one;  /* 0: empty */
} slot_t;

/* Records taken at a time by map_records and filter_records (see the module comment). */
#define GROUP 32
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(address) __builtin_prefetch((address), 1, 0)
#else
#define PREFETCH(address) ((void)(address))
#endif

/* The slot holding hash (h0, h1), or the empty slot where it would go. Double hashing over a
 * power of two of slots with an odd step visits every slot; the table is never full. */
static inline slot_t *
find_slot(slot_t *slots, uint64_t mask, const uint64_t h[2])
{
    uint64_t i = h[0] & mask;
    const uint64_t step = (h[1] | 1) & mask;
    for (;;) {
        slot_t *slot = &slots[i];
        if (slot->offset_plus_one == 0 || (slot->h0 == h[0] && slot->h1 == h[1]))
            return slot;
        i = (i + (step ? step : 1)) & mask;
    }
}

/* The table argument: a writable buffer of a power of two of slots (at least 2). */
static int
get_table(PyObject *obj, Py_buffer *view, slot_t **slots, uint64_t *mask)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_SIMPLE) != 0)
        return -1;
    Py_ssize_t count = view->len / (Py_ssize_t)sizeof(slot_t);
    if (view->len % (Py_ssize_t)sizeof(slot_t) || count < 2 || (count & (count - 1))) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the table must hold a power of two (at least 2) of 24-byte slots");
        return -1;
    }
    *slots = (slot_t *)view->buf;
    *mask = (uint64_t)count - 1;
    return 0;
}

static int
check_section(Py_buffer *view, Py_ssize_t start, Py_ssize_t count)
{
    if (start < 0 || start > view->len || count < 0) {
        PyErr_SetString(PyExc_ValueError, "start must lie in the buffer and count must not be negative");
        return -1;
    }
    return 0;
}

static inline uint64_t
load_be(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Put the records of one batch's uncompressed records section into the table; as map_records's loop.
 * Returns the records taken; *stopped is set when the map filled before the last one. */
static Py_ssize_t
map_section(slot_t *slots, uint64_t mask, uint64_t k0, uint64_t k1, Py_ssize_t *entries, Py_ssize_t max_entries,
            const uint8_t *buf, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t count, long long base_offset,
            long long min_offset, long long *last_put, int *stopped, Py_ssize_t *stopped_at, int *malformed)
{
    record_t group[GROUP];
    uint64_t hashes[GROUP][2];
    Py_ssize_t taken = 0;
    while (taken < count) {
        const Py_ssize_t n = count - taken < GROUP ? count - taken : GROUP;
        Py_ssize_t parsed = 0;
        for (; parsed < n; parsed++) {
            if (parse_record(buf, end, &pos, &group[parsed]) != 0) {
                *malformed = 1;
                break;
            }
            if (group[parsed].key_length >= 0) {
                siphash128(buf + group[parsed].key, group[parsed].key_length, k0, k1, hashes[parsed]);
                PREFETCH(&slots[hashes[parsed][0] & mask]);
            }
        }
        for (Py_ssize_t j = 0; j < parsed; j++) {
            const record_t *r = &group[j];
            const long long offset = base_offset + r->offset_delta;
            if (r->key_length < 0 || offset < min_offset)
                continue;
            slot_t *slot = find_slot(slots, mask, hashes[j]);
            if (slot->offset_plus_one == 0) {
                if (*entries >= max_entries) {
                    *stopped = 1;
                    *stopped_at = r->start;
                    return taken + j;
                }
                slot->h0 = hashes[j][0];
                slot->h1 = hashes[j][1];
                *entries += 1;
            }
            slot->offset_plus_one = offset + 1;
            *last_put = offset;
        }
        taken += parsed;
        if (*malformed)
            return taken;
    }
    if (pos != end)
        *malformed = 1;  /* bytes left after the batch's records */
    return taken;
}

static PyObject *
map_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj;
    Py_buffer table, view;
    unsigned long long k0, k1;
    Py_ssize_t entries, max_entries, start, count;
    long long base_offset, min_offset;
    if (!PyArg_ParseTuple(args, "OKKnny*nnLL:map_records", &table_obj, &k0, &k1, &entries, &max_entries,
                          &view, &start, &count, &base_offset, &min_offset))
        return NULL;
    slot_t *slots;
    uint64_t mask;
    if (check_section(&view, start, count) != 0 || get_table(table_obj, &table, &slots, &mask) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    long long last_put = -1;
    int stopped = 0, malformed = 0;
    Py_ssize_t taken, stopped_at = view.len;
    Py_BEGIN_ALLOW_THREADS
    taken = map_section(slots, mask, k0, k1, &entries, max_entries, (const uint8_t *)view.buf, view.len, start,
                        count, base_offset, min_offset, &last_put, &stopped, &stopped_at, &malformed);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&table);
    PyBuffer_Release(&view);
    if (malformed && !stopped)
        Py_RETURN_NONE;
    return Py_BuildValue("(nnLn)", entries, taken, last_put, stopped_at);
}

/* Batch header fields (kraftpy/protocol/batch_header.py). */
#define BATCH_HEADER_SIZE 61
#define CONTROL_OR_TRANSACTIONAL 0x30

static PyObject *
map_batches(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj;
    Py_buffer table, view;
    unsigned long long k0, k1;
    Py_ssize_t entries, max_entries, start;
    long long min_offset, latest;
    if (!PyArg_ParseTuple(args, "OKKnny*nLL:map_batches", &table_obj, &k0, &k1, &entries, &max_entries, &view,
                          &start, &min_offset, &latest))
        return NULL;
    slot_t *slots;
    uint64_t mask;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start must lie in the buffer");
        return NULL;
    }
    if (get_table(table_obj, &table, &slots, &mask) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = start;
    long long last_put = -1;
    int state = 0, malformed = 0;
    Py_BEGIN_ALLOW_THREADS
    while (end - pos >= BATCH_HEADER_SIZE) {
        const uint8_t *h = buf + pos;
        const long long base_offset = (long long)load_be(h, 8);
        const int32_t length = (int32_t)load_be(h + 8, 4);
        const int attributes = (int)load_be(h + 21, 2);
        const int32_t last_delta = (int32_t)load_be(h + 23, 4);
        const int32_t count = (int32_t)load_be(h + 57, 4);
        if (h[16] != 2 || length < BATCH_HEADER_SIZE - 12 || last_delta < 0 || count < 0) {
            malformed = 1;
            break;
        }
        const Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > end - pos)
            break;  /* the rest of this batch is in the next read */
        const long long last_offset = base_offset + last_delta;
        if (last_offset >= min_offset) {
            if ((attributes & 0x07) != 0) {
                state = 1;  /* compressed: the caller maps it */
                break;
            }
            if (!(attributes & CONTROL_OR_TRANSACTIONAL) && count > 0) {
                int stopped = 0;
                Py_ssize_t stopped_at = 0;
                map_section(slots, mask, k0, k1, &entries, max_entries, buf, pos + size, pos + BATCH_HEADER_SIZE,
                            count, base_offset, min_offset, &last_put, &stopped, &stopped_at, &malformed);
                if (stopped) {
                    malformed = 0;
                    state = 2;
                    break;
                }
                if (malformed)
                    break;
            }
            if (last_offset > latest)
                latest = last_offset;
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&table);
    PyBuffer_Release(&view);
    if (malformed)
        Py_RETURN_NONE;
    return Py_BuildValue("(nnLLi)", entries, pos, latest, last_put, state);
}

static PyObject *
grow_table(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *old_obj, *new_obj;
    Py_buffer old_view, new_view;
    if (!PyArg_ParseTuple(args, "OO:grow_table", &old_obj, &new_obj))
        return NULL;
    slot_t *old_slots, *new_slots;
    uint64_t old_mask, new_mask;
    if (get_table(old_obj, &old_view, &old_slots, &old_mask) != 0)
        return NULL;
    if (get_table(new_obj, &new_view, &new_slots, &new_mask) != 0) {
        PyBuffer_Release(&old_view);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (uint64_t i = 0; i <= old_mask; i++) {
        if (old_slots[i].offset_plus_one == 0)
            continue;
        const uint64_t h[2] = {old_slots[i].h0, old_slots[i].h1};
        *find_slot(new_slots, new_mask, h) = old_slots[i];
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&old_view);
    PyBuffer_Release(&new_view);
    Py_RETURN_NONE;
}

static PyObject *
filter_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj;
    Py_buffer table, view;
    unsigned long long k0, k1;
    Py_ssize_t start, count;
    long long base_offset, latest_offset;
    int retain_tombstones;
    if (!PyArg_ParseTuple(args, "OKKy*nnLLp:filter_records", &table_obj, &k0, &k1, &view, &start, &count,
                          &base_offset, &latest_offset, &retain_tombstones))
        return NULL;
    slot_t *slots;
    uint64_t mask;
    if (check_section(&view, start, count) != 0 || get_table(table_obj, &table, &slots, &mask) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *mask_obj = PyBytes_FromStringAndSize(NULL, count);
    if (mask_obj == NULL) {
        PyBuffer_Release(&table);
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *keep = (uint8_t *)PyBytes_AS_STRING(mask_obj);
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = start, kept = 0, tombstones = 0, keyless = 0;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    int malformed = 0;
    Py_BEGIN_ALLOW_THREADS
    record_t group[GROUP];
    uint64_t hashes[GROUP][2];
    for (Py_ssize_t done = 0; done < count && !malformed;) {
        const Py_ssize_t n = count - done < GROUP ? count - done : GROUP;
        Py_ssize_t parsed = 0;
        for (; parsed < n; parsed++) {
            record_t *r = &group[parsed];
            if (parse_record(buf, end, &pos, r) != 0) {
                malformed = 1;
                break;
            }
            if (r->key_length >= 0 && base_offset + r->offset_delta <= latest_offset) {
                siphash128(buf + r->key, r->key_length, k0, k1, hashes[parsed]);
                PREFETCH(&slots[hashes[parsed][0] & mask]);
            }
        }
        for (Py_ssize_t j = 0; j < parsed; j++) {
            const record_t *r = &group[j];
            const long long offset = base_offset + r->offset_delta;
            int retain;
            if (offset > latest_offset) {
                retain = 1;
            } else if (r->key_length < 0) {
                retain = 0;
                keyless += 1;
            } else {
                const slot_t *slot = find_slot(slots, mask, hashes[j]);
                const int latest = slot->offset_plus_one == 0 || offset >= slot->offset_plus_one - 1;
                retain = latest && (r->value_length >= 0 || retain_tombstones);
            }
            keep[done + j] = (uint8_t)retain;
            if (retain) {
                kept += 1;
                if (r->value_length < 0)
                    tombstones += 1;
                if (r->timestamp_delta < min_ts)
                    min_ts = r->timestamp_delta;
                if (r->timestamp_delta > max_ts)
                    max_ts = r->timestamp_delta;
            }
        }
        done += parsed;
    }
    if (!malformed && pos != end)
        malformed = 1;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&table);
    PyBuffer_Release(&view);
    if (malformed) {
        Py_DECREF(mask_obj);
        Py_RETURN_NONE;
    }
    if (kept == 0)
        min_ts = max_ts = 0;
    return Py_BuildValue("(NnnLLn)", mask_obj, kept, tombstones, (long long)min_ts, (long long)max_ts, keyless);
}

/* Write the zig-zag varint of ``value`` at out; returns the bytes written (at most 10). */
static inline Py_ssize_t
write_zigzag(uint8_t *out, int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 0;
    while (raw >= 0x80) {
        out[n++] = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    out[n++] = (uint8_t)raw;
    return n;
}

static PyObject *
rewrite_records(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view, mask;
    Py_ssize_t start, count;
    long long shift;
    if (!PyArg_ParseTuple(args, "y*nny*L:rewrite_records", &view, &start, &count, &mask, &shift))
        return NULL;
    if (check_section(&view, start, count) != 0 || mask.len != count) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the mask must hold one byte per record");
        PyBuffer_Release(&view);
        PyBuffer_Release(&mask);
        return NULL;
    }
    /* A record's length varint grows by at most 5 bytes and its timestamp delta by at most 10. */
    const Py_ssize_t bound = (view.len - start) + 15 * count;
    PyObject *out_obj = PyBytes_FromStringAndSize(NULL, bound);
    if (out_obj == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&mask);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(out_obj);
    const uint8_t *buf = (const uint8_t *)view.buf;
    const uint8_t *keep = (const uint8_t *)mask.buf;
    const Py_ssize_t end = view.len;
    Py_ssize_t pos = start, written = 0;
    int malformed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        if (parse_record(buf, end, &pos, &r) != 0) {
            malformed = 1;
            break;
        }
        if (!keep[i])
            continue;
        if (shift == 0) {
            memcpy(out + written, buf + r.start, (size_t)(r.end - r.start));
            written += r.end - r.start;
            continue;
        }
        uint8_t delta[10];
        const Py_ssize_t delta_size = write_zigzag(delta, r.timestamp_delta + shift);
        const Py_ssize_t rest = r.end - r.after_timestamp;
        const Py_ssize_t body = 1 + delta_size + rest;  /* attributes, timestamp delta, the rest */
        written += write_zigzag(out + written, (int64_t)body);
        out[written++] = buf[r.attributes];
        memcpy(out + written, delta, (size_t)delta_size);
        written += delta_size;
        memcpy(out + written, buf + r.after_timestamp, (size_t)rest);
        written += rest;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&mask);
    if (malformed) {
        Py_DECREF(out_obj);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out_obj, written) != 0)
        return NULL;
    return out_obj;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, count) -> (min_timestamp_delta, max_timestamp_delta, null_keys) or None\n\n"
     "Check the records section at buffer[start:] holds exactly ``count`` well-formed records with\n"
     "offset deltas 0, 1, 2, ...; None when it does not."},
    {"map_records", map_records, METH_VARARGS,
     "map_records(table, key0, key1, entries, max_entries, buffer, start, count, base_offset, min_offset)\n"
     "-> (entries, records taken, last offset put, where it stopped) or None\n\nPut the keys of the records into the cleaner's offset map."},
    {"map_batches", map_batches, METH_VARARGS,
     "map_batches(table, key0, key1, entries, max_entries, buffer, start, min_offset, latest)\n"
     "-> (entries, position, latest, last offset put, state) or None\n\nmap_records over the batches of a read."},
    {"grow_table", grow_table, METH_VARARGS,
     "grow_table(old, new) -> None\n\nMove the entries of an offset map's table into a larger one."},
    {"filter_records", filter_records, METH_VARARGS,
     "filter_records(table, key0, key1, buffer, start, count, base_offset, latest_offset, retain_tombstones)\n"
     "-> (mask, kept, kept tombstones, min kept timestamp delta, max kept timestamp delta, keyless) or None\n\n"
     "Which records a cleaned batch keeps."},
    {"rewrite_records", rewrite_records, METH_VARARGS,
     "rewrite_records(buffer, start, count, mask, timestamp_shift) -> bytes or None\n\n"
     "The records the mask keeps, their timestamp deltas shifted."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_scan",
    "One pass over the records of a RecordBatch at C speed (see kraftpy.protocol.record_validation).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__record_scan(void)
{
    return PyModule_Create(&module);
}
