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
 * compacted log twice, and its per-record loops live here too, over the same record layout. Its
 * map is two buffers: ``table``, a writable buffer of 24-byte slots, a power of two of them (hash
 * 16 bytes, then offset + 1 as a native int64, 0 for an empty slot), and ``superseded``, a
 * writable bitmap whose bit i stands for offset ``superseded_base + i`` (see below).
 *
 * map_records(table, superseded, superseded_base, key0, key1, entries, max_entries, buffer, start, count,
 *             base_offset, min_offset)
 *     -> (entries, records taken, offset of the last record put or -1, where it stopped) or None
 *
 *     puts ``key hash -> offset`` for every record at or after ``min_offset`` that has a key into
 *     the table, until the map holds ``max_entries`` keys and a record brings a new one: it stops
 *     before that record (and says where it starts). A slot keeps the largest offset put for its
 *     hash; the smaller one of the two is set in ``superseded``.
 *
 * map_batches(table, superseded, superseded_base, key0, key1, entries, max_entries, buffer, start,
 *             min_offset, latest)
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
 * filter_records(table, superseded, superseded_base, key0, key1, buffer, start, count, base_offset,
 *                latest_offset, retain_tombstones)
 *     -> (mask, kept, kept tombstones, smallest and largest kept timestamp delta, keyless) or None
 *
 *     decides which records a cleaned batch keeps (Kafka's Cleaner.shouldRetainRecord): every record
 *     after ``latest_offset``; otherwise a record with a key whose offset is the map's for that key
 *     (or the key is not in the map), a tombstone (null value) only with ``retain_tombstones``.
 *     ``mask`` holds one byte per record, 1 to keep it. For a record whose offset the bitmap
 *     covers, "the map's offset for its key" is "its bit is clear": no hash, no lookup.
 *
 * rewrite_records(buffer, start, count, mask, timestamp_shift) -> bytes
 *
 *     the records ``mask`` keeps, back to back, each with ``timestamp_shift`` added to its
 *     timestamp delta (the batch's base timestamp moved); the other fields as they were.
 *
 * clean_batches(table, superseded, superseded_base, key0, key1, latest_offset, buffer, start, now,
 *               delete_retention_ms, producers, out, infos, counters)
 *     -> (state, position, bytes written to out, batches written, whether any batch changed)
 *
 *     the cleaner's copy step (Cleaner.clean_batch in kraftpy/storage/cleaner.py, whose rules it
 *     follows to the byte) over every whole batch of ``buffer`` from ``start``: each batch's CRC is
 *     checked, then the batch is dropped, kept as it is, written as an empty batch (the last batch
 *     of a producer in ``producers``, sorted int64 pairs of producer id and last offset), or
 *     rewritten with the records filter_records keeps (new record count, base timestamp, delete
 *     horizon bit and CRC). Output batches go to ``out`` back to back, seven int64 per batch to
 *     ``infos`` (position in out, size, base offset, last offset, max timestamp, leader epoch,
 *     record count), and counts are added to ``counters`` (bytes read, records read, records kept,
 *     keyless records dropped, batches emptied, whether a tombstone was kept, the earliest delete
 *     horizon of the kept tombstones). It stops at the end of the whole batches (state 0), before a
 *     batch it leaves to the caller (state 1: compressed, a bad CRC, a header or record that does
 *     not parse, a timestamp past int64: the Python code cleans it or says what is wrong), or
 *     before a batch that may not fit ``out`` or ``infos`` (state 2).
 *
 * crc32c(buffer, software=False) -> int
 *
 *     the CRC-32C of ``buffer`` as a batch header holds it (the checks and the new batches of
 *     clean_batches use it); with ``software``, without the processor's CRC instruction.
 *
 * Key hashes are SipHash-1-3 with a 128-bit output, keyed by (key0, key1): a fresh random key per
 * map, so nobody can choose keys that collide (a collision could drop a key's latest record).
 * Records are taken GROUP at a time: first parsed and hashed, their slots' cache lines fetched
 * ahead, then looked up, so that the table's cache misses overlap instead of adding up.
 *
 * The superseded bitmap spares the copy step a second hash and lookup for the records of the dirty
 * part (those the map pass put): a record there is its key's last exactly when no later record of
 * the same hash was put, which is what the map pass marks as it goes. It holds only for the records
 * the map pass read, at the offsets it read them: the cleaner filters the same segments it mapped,
 * which nothing rewrites while a pass runs. Records below it (the clean part) are looked up.
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

/* The superseded bitmap: bit i set when offset base + i was put into the map and a later record
 * of the same key hash was put too (see the module comment). */
typedef struct {
    uint8_t *bits;
    long long base, count;
} superseded_t;

static int
get_superseded(PyObject *obj, long long base, Py_buffer *view, superseded_t *s)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_SIMPLE) != 0)
        return -1;
    s->bits = (uint8_t *)view->buf;
    s->base = base;
    s->count = (long long)view->len * 8;
    return 0;
}

static inline int
covers(const superseded_t *s, long long offset)
{
    return offset >= s->base && offset - s->base < s->count;
}

static inline void
mark_superseded(superseded_t *s, long long offset)
{
    if (covers(s, offset))
        s->bits[(offset - s->base) >> 3] |= (uint8_t)(1u << ((offset - s->base) & 7));
}

static inline int
is_superseded(const superseded_t *s, long long offset)
{
    return (s->bits[(offset - s->base) >> 3] >> ((offset - s->base) & 7)) & 1;
}

/* The map arguments of the functions below: the table and the superseded bitmap with its base offset. */
typedef struct {
    Py_buffer table_view, bits_view;
    slot_t *slots;
    uint64_t mask;
    superseded_t superseded;
} map_t;

static int
get_map(PyObject *table, PyObject *bits, long long bits_base, map_t *m)
{
    if (get_table(table, &m->table_view, &m->slots, &m->mask) != 0)
        return -1;
    if (get_superseded(bits, bits_base, &m->bits_view, &m->superseded) != 0) {
        PyBuffer_Release(&m->table_view);
        return -1;
    }
    return 0;
}

static void
release_map(map_t *m)
{
    PyBuffer_Release(&m->table_view);
    PyBuffer_Release(&m->bits_view);
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
map_section(slot_t *slots, uint64_t mask, uint64_t k0, uint64_t k1, superseded_t *superseded, Py_ssize_t *entries,
            Py_ssize_t max_entries, const uint8_t *buf, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t count, long long base_offset,
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
            if (group[parsed].key_length >= 0 && base_offset + group[parsed].offset_delta >= min_offset) {
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
                slot->offset_plus_one = offset + 1;
                *entries += 1;
            } else if (slot->offset_plus_one - 1 < offset) {
                mark_superseded(superseded, slot->offset_plus_one - 1);
                slot->offset_plus_one = offset + 1;
            } else if (slot->offset_plus_one - 1 > offset) {
                mark_superseded(superseded, offset);  /* a batch put again after the table grew */
            }
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
    PyObject *table_obj, *bits_obj;
    Py_buffer view;
    unsigned long long k0, k1;
    Py_ssize_t entries, max_entries, start, count;
    long long bits_base, base_offset, min_offset;
    if (!PyArg_ParseTuple(args, "OOLKKnny*nnLL:map_records", &table_obj, &bits_obj, &bits_base, &k0, &k1, &entries,
                          &max_entries, &view, &start, &count, &base_offset, &min_offset))
        return NULL;
    map_t m;
    if (check_section(&view, start, count) != 0 || get_map(table_obj, bits_obj, bits_base, &m) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    long long last_put = -1;
    int stopped = 0, malformed = 0;
    Py_ssize_t taken, stopped_at = view.len;
    Py_BEGIN_ALLOW_THREADS
    taken = map_section(m.slots, m.mask, k0, k1, &m.superseded, &entries, max_entries, (const uint8_t *)view.buf,
                        view.len, start, count, base_offset, min_offset, &last_put, &stopped, &stopped_at,
                        &malformed);
    Py_END_ALLOW_THREADS
    release_map(&m);
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
    PyObject *table_obj, *bits_obj;
    Py_buffer view;
    unsigned long long k0, k1;
    Py_ssize_t entries, max_entries, start;
    long long bits_base, min_offset, latest;
    if (!PyArg_ParseTuple(args, "OOLKKnny*nLL:map_batches", &table_obj, &bits_obj, &bits_base, &k0, &k1, &entries,
                          &max_entries, &view, &start, &min_offset, &latest))
        return NULL;
    map_t m;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start must lie in the buffer");
        return NULL;
    }
    if (get_map(table_obj, bits_obj, bits_base, &m) != 0) {
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
            if ((attributes & 0x07) != 0 || (attributes & CONTROL_OR_TRANSACTIONAL)) {
                state = 1;  /* compressed, or a transaction's (its fate needs the aborted ones): the caller maps it */
                break;
            }
            if (count > 0) {
                int stopped = 0;
                Py_ssize_t stopped_at = 0;
                map_section(m.slots, m.mask, k0, k1, &m.superseded, &entries, max_entries, buf, pos + size,
                            pos + BATCH_HEADER_SIZE,
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
    release_map(&m);
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

/* What filter_section decided for one batch's records. */
typedef struct {
    Py_ssize_t kept, tombstones, keyless;
    int64_t min_ts, max_ts;  /* of the kept records; 0 and 0 when none is kept */
} filtered_t;

/* filter_records's loop over the ``count`` records of buf[pos:end): keep[i] = 1 for each record
 * kept, and (unless ``kept_records`` is NULL) the kept records' fields, in order, in kept_records.
 * Returns -1 when the records do not parse or do not end exactly at ``end``. */
static int
filter_section(const map_t *m, uint64_t k0, uint64_t k1, const uint8_t *buf, Py_ssize_t end, Py_ssize_t pos,
               Py_ssize_t count, long long base_offset, long long latest_offset, int retain_tombstones,
               uint8_t *keep, record_t *kept_records, filtered_t *out)
{
    slot_t *const slots = m->slots;
    const uint64_t mask = m->mask;
    const superseded_t *const superseded = &m->superseded;
    record_t group[GROUP];
    uint64_t hashes[GROUP][2];
    Py_ssize_t kept = 0, tombstones = 0, keyless = 0;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    for (Py_ssize_t done = 0; done < count;) {
        const Py_ssize_t n = count - done < GROUP ? count - done : GROUP;
        for (Py_ssize_t parsed = 0; parsed < n; parsed++) {
            record_t *r = &group[parsed];
            if (parse_record(buf, end, &pos, r) != 0)
                return -1;
            const long long offset = base_offset + r->offset_delta;
            if (r->key_length >= 0 && offset <= latest_offset && !covers(superseded, offset)) {
                siphash128(buf + r->key, r->key_length, k0, k1, hashes[parsed]);
                PREFETCH(&slots[hashes[parsed][0] & mask]);
            }
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            const record_t *r = &group[j];
            const long long offset = base_offset + r->offset_delta;
            int retain;
            if (offset > latest_offset) {
                retain = 1;
            } else if (r->key_length < 0) {
                retain = 0;
                keyless += 1;
            } else if (covers(superseded, offset)) {
                retain = !is_superseded(superseded, offset) && (r->value_length >= 0 || retain_tombstones);
            } else {
                const slot_t *slot = find_slot(slots, mask, hashes[j]);
                const int latest = slot->offset_plus_one == 0 || offset >= slot->offset_plus_one - 1;
                retain = latest && (r->value_length >= 0 || retain_tombstones);
            }
            keep[done + j] = (uint8_t)retain;
            if (retain) {
                if (kept_records != NULL)
                    kept_records[kept] = *r;
                kept += 1;
                if (r->value_length < 0)
                    tombstones += 1;
                if (r->timestamp_delta < min_ts)
                    min_ts = r->timestamp_delta;
                if (r->timestamp_delta > max_ts)
                    max_ts = r->timestamp_delta;
            }
        }
        done += n;
    }
    if (pos != end)
        return -1;
    out->kept = kept;
    out->tombstones = tombstones;
    out->keyless = keyless;
    out->min_ts = kept ? min_ts : 0;
    out->max_ts = kept ? max_ts : 0;
    return 0;
}

static PyObject *
filter_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj, *bits_obj;
    Py_buffer view;
    unsigned long long k0, k1;
    Py_ssize_t start, count;
    long long bits_base, base_offset, latest_offset;
    int retain_tombstones;
    if (!PyArg_ParseTuple(args, "OOLKKy*nnLLp:filter_records", &table_obj, &bits_obj, &bits_base, &k0, &k1, &view,
                          &start, &count, &base_offset, &latest_offset, &retain_tombstones))
        return NULL;
    map_t m;
    if (check_section(&view, start, count) != 0 || get_map(table_obj, bits_obj, bits_base, &m) != 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *mask_obj = PyBytes_FromStringAndSize(NULL, count);
    if (mask_obj == NULL) {
        release_map(&m);
        PyBuffer_Release(&view);
        return NULL;
    }
    uint8_t *keep = (uint8_t *)PyBytes_AS_STRING(mask_obj);
    filtered_t f;
    int malformed;
    Py_BEGIN_ALLOW_THREADS
    malformed = filter_section(&m, k0, k1, (const uint8_t *)view.buf, view.len, start, count, base_offset,
                               latest_offset, retain_tombstones, keep, NULL, &f);
    Py_END_ALLOW_THREADS
    release_map(&m);
    PyBuffer_Release(&view);
    if (malformed) {
        Py_DECREF(mask_obj);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NnnLLn)", mask_obj, f.kept, f.tombstones, (long long)f.min_ts, (long long)f.max_ts,
                         f.keyless);
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

/* A record's length varint grows by at most 5 bytes and its timestamp delta by at most 10. */
#define REWRITE_GROWTH 15

/* rewrite_records's loop: the kept records of buf[pos:end) written to ``out`` (room for
 * (end - pos) + REWRITE_GROWTH * count bytes); returns the bytes written, or -1 when a record does
 * not parse. */
/* Write record r of buf to out, ``shift`` added to its timestamp delta; returns the bytes written. */
static inline Py_ssize_t
rewrite_record(const uint8_t *buf, const record_t *r, int64_t shift, uint8_t *out)
{
    if (shift == 0) {
        memcpy(out, buf + r->start, (size_t)(r->end - r->start));
        return r->end - r->start;
    }
    uint8_t delta[10];
    const Py_ssize_t delta_size = write_zigzag(delta, r->timestamp_delta + shift);
    const Py_ssize_t rest = r->end - r->after_timestamp;
    const Py_ssize_t body = 1 + delta_size + rest;  /* attributes, timestamp delta, the rest */
    Py_ssize_t written = write_zigzag(out, (int64_t)body);
    out[written++] = buf[r->attributes];
    memcpy(out + written, delta, (size_t)delta_size);
    written += delta_size;
    memcpy(out + written, buf + r->after_timestamp, (size_t)rest);
    return written + rest;
}

static Py_ssize_t
rewrite_section(const uint8_t *buf, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t count, const uint8_t *keep,
                int64_t shift, uint8_t *out)
{
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t r;
        if (parse_record(buf, end, &pos, &r) != 0)
            return -1;
        if (keep[i])
            written += rewrite_record(buf, &r, shift, out + written);
    }
    return written;
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
    const Py_ssize_t bound = (view.len - start) + REWRITE_GROWTH * count;
    PyObject *out_obj = PyBytes_FromStringAndSize(NULL, bound);
    if (out_obj == NULL) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&mask);
        return NULL;
    }
    Py_ssize_t written;
    Py_BEGIN_ALLOW_THREADS
    written = rewrite_section((const uint8_t *)view.buf, view.len, start, count, (const uint8_t *)mask.buf, shift,
                              (uint8_t *)PyBytes_AS_STRING(out_obj));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyBuffer_Release(&mask);
    if (written < 0) {
        Py_DECREF(out_obj);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out_obj, written) != 0)
        return NULL;
    return out_obj;
}

/* -- CRC-32C ------------------------------------------------------------------------------ */

/* The batch CRC (Castagnoli, reflected polynomial 0x82F63B78) of the copy step, so that a whole read
 * is cleaned in one call. The functions below work on the raw register (no inversion before or
 * after; crc32c() adds it). The x86-64 SSE4.2 instruction runs three independent streams of a
 * block each and joins them: the register of A then B is shift(register after A, |B|) ^ (register
 * of B from 0), where shift, appending |B| zero bytes, is linear in the register and is therefore
 * a lookup of its four bytes in tables made at import. Without SSE4.2 (or off x86-64) the tables
 * of slicing-by-8 do the same work more slowly. */

#define CRC32C_POLY 0x82F63B78u
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t crc_table[8][256];
static uint32_t crc_shift_long[4][256];
static uint32_t crc_shift_short[4][256];
static int crc_hardware;

static uint32_t
crc_software(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        const uint64_t w = load_le64(p) ^ crc;
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF]
            ^ crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF]
            ^ crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

static inline uint32_t
crc_shift(const uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
}

/* table[k][b] = the register ``b << 8k`` after ``zeros`` zero bytes. */
static void
crc_make_shift(uint32_t table[4][256], const uint8_t *zeros, size_t length)
{
    uint32_t basis[32];
    for (int i = 0; i < 32; i++)
        basis[i] = crc_software((uint32_t)1 << i, zeros, length);
    for (int k = 0; k < 4; k++) {
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b & (1 << i))
                    v ^= basis[8 * k + i];
            table[k][b] = v;
        }
    }
}

static int
crc_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xFF];
    uint8_t *zeros = calloc(CRC_LONG, 1);
    if (zeros == NULL)
        return -1;
    crc_make_shift(crc_shift_long, zeros, CRC_LONG);
    crc_make_shift(crc_shift_short, zeros, CRC_SHORT);
    free(zeros);
    return 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_CRC_HARDWARE 1

static inline uint64_t
load_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c0 = crc;
    while (n >= 3 * CRC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        for (const uint8_t *end = p + CRC_LONG; p < end; p += 8) {
            c0 = _mm_crc32_u64(c0, load_u64(p));
            c1 = _mm_crc32_u64(c1, load_u64(p + CRC_LONG));
            c2 = _mm_crc32_u64(c2, load_u64(p + 2 * CRC_LONG));
        }
        c0 = crc_shift(crc_shift_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_shift_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        for (const uint8_t *end = p + CRC_SHORT; p < end; p += 8) {
            c0 = _mm_crc32_u64(c0, load_u64(p));
            c1 = _mm_crc32_u64(c1, load_u64(p + CRC_SHORT));
            c2 = _mm_crc32_u64(c2, load_u64(p + 2 * CRC_SHORT));
        }
        c0 = crc_shift(crc_shift_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_shift_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    for (; n >= 8; p += 8, n -= 8)
        c0 = _mm_crc32_u64(c0, load_u64(p));
    uint32_t c = (uint32_t)c0;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

/* The CRC-32C of p[0:n), as the batch header stores it. */
static uint32_t
crc32c_of(const uint8_t *p, size_t n)
{
#ifdef HAVE_CRC_HARDWARE
    if (crc_hardware)
        return ~crc_sse42(0xFFFFFFFFu, p, n);
#endif
    return ~crc_software(0xFFFFFFFFu, p, n);
}

static PyObject *
crc32c(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    int software = 0;
    if (!PyArg_ParseTuple(args, "y*|p:crc32c", &view, &software))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    const size_t n = (size_t)view.len;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = software ? ~crc_software(0xFFFFFFFFu, p, n) : crc32c_of(p, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* -- the copy step, a read at a time ----------------------------------------------------- */

/* Batch header fields used below (offsets as in kraftpy/protocol/batch_header.py). */
#define H_LENGTH 8
#define H_LEADER_EPOCH 12
#define H_MAGIC 16
#define H_CRC 17
#define H_ATTRIBUTES 21
#define H_LAST_OFFSET_DELTA 23
#define H_BASE_TIMESTAMP 27
#define H_MAX_TIMESTAMP 35
#define H_PRODUCER_ID 43
#define H_RECORD_COUNT 57
#define CODEC_MASK 0x07
#define DELETE_HORIZON_BIT 0x40
#define EMPTY_BATCH_ATTRIBUTES 0x38  /* Kafka's writeEmptyHeader keeps timestamp type, transactional, control */

/* The fields of an output batch in ``infos`` (native int64 each), as kraftpy.storage.segment.BatchInfo. */
enum { INFO_POSITION, INFO_SIZE, INFO_BASE_OFFSET, INFO_LAST_OFFSET, INFO_MAX_TIMESTAMP, INFO_LEADER_EPOCH,
       INFO_RECORD_COUNT, INFO_FIELDS };
/* The counters of ``stats`` (native int64 each), added to. */
enum { STAT_BYTES_READ, STAT_RECORDS_READ, STAT_RECORDS_KEPT, STAT_KEYLESS_DROPPED, STAT_BATCHES_EMPTIED,
       STAT_HORIZON_SEEN, STAT_EARLIEST_HORIZON, STAT_FIELDS };

static inline void
store_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* *result = a + b, or 1 when that is past int64 (*result untouched). */
static inline int
add_overflows(int64_t a, int64_t b, int64_t *result)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 1;
    *result = a + b;
    return 0;
}

/* The last offset of producer ``id`` in ``producers`` (pairs of int64, sorted by id), or -1 (none). */
static long long
producer_last_offset(const int64_t *producers, Py_ssize_t count, int64_t id)
{
    Py_ssize_t low = 0, high = count;
    while (low < high) {
        const Py_ssize_t mid = low + (high - low) / 2;
        if (producers[2 * mid] < id)
            low = mid + 1;
        else
            high = mid;
    }
    return low < count && producers[2 * low] == id ? producers[2 * low + 1] : -1;
}

/* Finish the batch written at out (header copied from the input, records section of
 * ``records_size`` bytes after it): length, attributes, base timestamp, record count and CRC. */
static void
seal_batch(uint8_t *out, Py_ssize_t records_size, int attributes, int64_t base_timestamp, int32_t record_count)
{
    store_be(out + H_LENGTH, (uint64_t)(BATCH_HEADER_SIZE - 12 + records_size), 4);
    store_be(out + H_ATTRIBUTES, (uint64_t)attributes, 2);
    store_be(out + H_BASE_TIMESTAMP, (uint64_t)base_timestamp, 8);
    store_be(out + H_RECORD_COUNT, (uint64_t)(uint32_t)record_count, 4);
    store_be(out + H_CRC, crc32c_of(out + H_ATTRIBUTES, (size_t)(BATCH_HEADER_SIZE - H_ATTRIBUTES + records_size)), 4);
}

enum { CLEAN_DONE = 0, CLEAN_FOR_PYTHON = 1, CLEAN_OUT_FULL = 2 };

static PyObject *
clean_batches(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj, *bits_obj;
    Py_buffer view, producers, out_view, infos_view, stats_view;
    unsigned long long k0, k1;
    long long bits_base, latest_offset, now, delete_retention_ms;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "OOLKKLy*nLLy*w*w*w*:clean_batches", &table_obj, &bits_obj, &bits_base, &k0, &k1,
                          &latest_offset, &view, &start, &now, &delete_retention_ms, &producers, &out_view,
                          &infos_view, &stats_view))
        return NULL;
    map_t m;
    int have_table = 0;
    const char *problem = NULL;
    if (start < 0 || start > view.len)
        problem = "start must lie in the buffer";
    else if (producers.len % 16)
        problem = "producers must hold pairs of int64";
    else if (stats_view.len < STAT_FIELDS * 8)
        problem = "stats must hold the counters";
    if (problem == NULL) {
        if (get_map(table_obj, bits_obj, bits_base, &m) == 0)
            have_table = 1;
    } else {
        PyErr_SetString(PyExc_ValueError, problem);
    }
    if (!have_table) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&producers);
        PyBuffer_Release(&out_view);
        PyBuffer_Release(&infos_view);
        PyBuffer_Release(&stats_view);
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    const int64_t *pids = (const int64_t *)producers.buf;
    const Py_ssize_t pid_count = producers.len / 16;
    uint8_t *out = (uint8_t *)out_view.buf;
    const Py_ssize_t out_capacity = out_view.len;
    int64_t *infos = (int64_t *)infos_view.buf;
    const Py_ssize_t info_capacity = infos_view.len / (INFO_FIELDS * 8);
    int64_t stats[STAT_FIELDS];
    memcpy(stats, stats_view.buf, sizeof(stats));
    Py_ssize_t pos = start, written = 0, batches = 0;
    int state = CLEAN_DONE, changed = 0, no_memory = 0;
    uint8_t *keep = NULL;
    record_t *kept_records = NULL;
    Py_ssize_t keep_size = 0;

    Py_BEGIN_ALLOW_THREADS
    while (end - pos >= BATCH_HEADER_SIZE) {
        const uint8_t *h = buf + pos;
        const int32_t length = (int32_t)load_be(h + H_LENGTH, 4);
        if (h[H_MAGIC] != 2 || length < BATCH_HEADER_SIZE - 12) {
            state = CLEAN_FOR_PYTHON;  /* it says what is wrong */
            break;
        }
        const Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > end - pos)
            break;  /* the rest of this batch is in the next read */
        const int32_t count = (int32_t)load_be(h + H_RECORD_COUNT, 4);
        const int32_t last_delta = (int32_t)load_be(h + H_LAST_OFFSET_DELTA, 4);
        if (count < 0 || last_delta < 0) {
            state = CLEAN_FOR_PYTHON;
            break;
        }
        if (batches == info_capacity || out_capacity - written < size + (Py_ssize_t)REWRITE_GROWTH * count) {
            state = CLEAN_OUT_FULL;
            break;
        }
        if ((uint32_t)load_be(h + H_CRC, 4) != crc32c_of(h + H_ATTRIBUTES, (size_t)(size - H_ATTRIBUTES))) {
            state = CLEAN_FOR_PYTHON;  /* it raises the CRC mismatch */
            break;
        }
        const int attributes = (int)load_be(h + H_ATTRIBUTES, 2);
        const long long base_offset = (long long)load_be(h, 8);
        const long long last_offset = base_offset + last_delta;
        const int64_t base_timestamp = (int64_t)load_be(h + H_BASE_TIMESTAMP, 8);
        const int64_t producer_id = (int64_t)load_be(h + H_PRODUCER_ID, 8);
        /* What the batch becomes (as Cleaner.clean_batch decides). */
        enum { DROPPED, AS_IT_IS, EMPTY_BATCH, REENCODED } fate;
        filtered_t f = {0, 0, 0, 0, 0};
        int64_t new_base = base_timestamp, shift = 0;
        int new_attributes = attributes;
        if (attributes & CONTROL_OR_TRANSACTIONAL) {
            state = CLEAN_FOR_PYTHON;  /* a transaction's batch or marker: decided there, with the aborted ones */
            break;
        } else {
            const int last_of_producer = producer_id != -1
                && producer_last_offset(pids, pid_count, producer_id) == last_offset;
            if (count == 0) {
                fate = last_of_producer ? AS_IT_IS : DROPPED;
            } else {
                if (attributes & CODEC_MASK) {
                    state = CLEAN_FOR_PYTHON;  /* compressed: decompressed and cleaned there */
                    break;
                }
                if (keep_size < count) {
                    uint8_t *larger = realloc(keep, (size_t)count);
                    if (larger != NULL)
                        keep = larger;
                    record_t *more = realloc(kept_records, (size_t)count * sizeof(record_t));
                    if (more != NULL)
                        kept_records = more;
                    if (larger == NULL || more == NULL) {
                        no_memory = 1;
                        break;
                    }
                    keep_size = count;
                }
                const int has_horizon = (attributes & DELETE_HORIZON_BIT) != 0;
                const int retain_tombstones = !has_horizon || now < base_timestamp;
                if (filter_section(&m, k0, k1, buf, pos + size, pos + BATCH_HEADER_SIZE, count, base_offset,
                                   latest_offset, retain_tombstones, keep, kept_records, &f) != 0) {
                    state = CLEAN_FOR_PYTHON;  /* it says which batch does not parse */
                    break;
                }
                if (f.kept == 0) {
                    fate = last_of_producer ? EMPTY_BATCH : DROPPED;
                } else {
                    const int set_horizon = f.tombstones > 0 && !has_horizon;
                    int overflow = 0;
                    if (set_horizon)
                        overflow = add_overflows(now, delete_retention_ms, &new_base);
                    else if (!has_horizon)
                        overflow = add_overflows(base_timestamp, f.min_ts, &new_base);
                    if (overflow || new_base == INT64_MIN || add_overflows(base_timestamp, -new_base, &shift)) {
                        state = CLEAN_FOR_PYTHON;  /* timestamps past int64: as the Python path does */
                        break;
                    }
                    if (set_horizon || has_horizon)
                        new_attributes |= DELETE_HORIZON_BIT;
                    fate = f.kept == count && !set_horizon ? AS_IT_IS : REENCODED;
                }
            }
        }
        Py_ssize_t out_size = 0;
        int32_t out_count = 0;
        uint8_t *o = out + written;
        if (fate == AS_IT_IS) {
            memcpy(o, h, (size_t)size);
            out_size = size;
            out_count = count;
        } else if (fate == EMPTY_BATCH) {
            memcpy(o, h, BATCH_HEADER_SIZE);
            seal_batch(o, 0, attributes & EMPTY_BATCH_ATTRIBUTES, -1, 0);
            out_size = BATCH_HEADER_SIZE;
        } else if (fate == REENCODED) {
            Py_ssize_t records_size = 0;
            for (Py_ssize_t i = 0; i < f.kept; i++)
                records_size += rewrite_record(buf, &kept_records[i], shift, o + BATCH_HEADER_SIZE + records_size);
            memcpy(o, h, BATCH_HEADER_SIZE);
            seal_batch(o, records_size, new_attributes, new_base, (int32_t)f.kept);
            out_size = BATCH_HEADER_SIZE + records_size;
            out_count = (int32_t)f.kept;
        }
        stats[STAT_BYTES_READ] += size;
        stats[STAT_RECORDS_READ] += count;
        stats[STAT_RECORDS_KEPT] += f.kept;
        stats[STAT_KEYLESS_DROPPED] += f.keyless;
        if (count > 0 && f.kept == 0)
            stats[STAT_BATCHES_EMPTIED] += 1;
        if (f.tombstones) {
            if (!stats[STAT_HORIZON_SEEN] || new_base < stats[STAT_EARLIEST_HORIZON])
                stats[STAT_EARLIEST_HORIZON] = new_base;
            stats[STAT_HORIZON_SEEN] = 1;
        }
        if (fate != AS_IT_IS)
            changed = 1;
        if (fate != DROPPED) {
            int64_t *info = infos + batches * INFO_FIELDS;
            info[INFO_POSITION] = written;
            info[INFO_SIZE] = out_size;
            info[INFO_BASE_OFFSET] = base_offset;
            info[INFO_LAST_OFFSET] = last_offset;
            info[INFO_MAX_TIMESTAMP] = (int64_t)load_be(h + H_MAX_TIMESTAMP, 8);
            info[INFO_LEADER_EPOCH] = (int32_t)load_be(h + H_LEADER_EPOCH, 4);
            info[INFO_RECORD_COUNT] = out_count;
            written += out_size;
            batches += 1;
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS

    free(keep);
    free(kept_records);
    memcpy(stats_view.buf, stats, sizeof(stats));
    release_map(&m);
    PyBuffer_Release(&view);
    PyBuffer_Release(&producers);
    PyBuffer_Release(&out_view);
    PyBuffer_Release(&infos_view);
    PyBuffer_Release(&stats_view);
    if (no_memory)
        return PyErr_NoMemory();
    return Py_BuildValue("(innni)", state, pos, written, batches, changed);
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
    {"clean_batches", clean_batches, METH_VARARGS,
     "clean_batches(table, key0, key1, latest_offset, buffer, start, now, delete_retention_ms, producers, out,\n"
     "              infos, stats) -> (state, position, out length, output batches, changed)\n\n"
     "The log cleaner's copy step over the whole batches of a read."},
    {"crc32c", crc32c, METH_VARARGS,
     "crc32c(buffer, software=False) -> int\n\nThe CRC-32C of the buffer (software: without the processor's instruction)."},
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
    if (crc_init() != 0)
        return PyErr_NoMemory();
#ifdef HAVE_CRC_HARDWARE
    __builtin_cpu_init();
    crc_hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *module_obj = PyModule_Create(&module);
    if (module_obj != NULL && PyModule_AddIntConstant(module_obj, "CRC32C_HARDWARE", crc_hardware) != 0) {
        Py_DECREF(module_obj);
        return NULL;
    }
    return module_obj;
}
