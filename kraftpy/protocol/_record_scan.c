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
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, start, count) -> (min_timestamp_delta, max_timestamp_delta, null_keys) or None\n\n"
     "Check the records section at buffer[start:] holds exactly ``count`` well-formed records with\n"
     "offset deltas 0, 1, 2, ...; None when it does not."},
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
