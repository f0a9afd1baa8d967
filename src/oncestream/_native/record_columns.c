/*
 * oncestream._native.record_columns: Kafka record batch v2 records sections -> Arrow column buffers.
 *
 * Why hand-written: no maintained library decodes a Kafka v2 records section into columns.
 * librdkafka and aiokafka's C decoder (aiokafka.record._crecords) build one object per record,
 * which is the per-record cost the Spark reader must avoid; pyarrow knows nothing of Kafka's
 * zig-zag varint layout. Decompression stays in cramjam (protocol/compression.py): this module
 * only walks the already decompressed records of one batch.
 *
 * One ColumnBuilder gathers the rows of one Arrow batch. append() walks the records of a batch
 * and appends, for each record whose offset lies in [position, end), its offset, timestamp (us),
 * timestamp type, key, value and headers to growable buffers laid out as Arrow wants them
 * (int32 offsets + data + validity bitmaps, the latter only once a null appears); finish() hands the
 * buffers (Block objects, buffer protocol, no copy) to Python, which wraps them with pyarrow's
 * Array.from_buffers (oncestream/spark/arrow_columns.py). Their memory is pooled (see below).
 *
 * It follows exactly the rules of the pure-Python builder in oncestream/spark/partition_reader.py
 * (_append_records), which stays the fallback when this module is not built; the unit tests run
 * both on the same inputs and compare the Arrow batches:
 *   - varints are Kafka's zig-zag varlongs of at most ten bytes;
 *   - a record length below zero or past the section is corrupt;
 *   - a record outside [position, end) is skipped after its offset delta (nothing else of it is
 *     checked, as in the Python builder);
 *   - a kept record's fields must end exactly at the record's end;
 *   - a null key/value/header value is a negative length; headers: null list when there are none,
 *     a null header key becomes "", a header key that is not UTF-8 is decoded with replacement.
 * Every malformed input raises oncestream.errors.CorruptRecordError; a column that would pass
 * Arrow's 2 GiB int32 offset limit raises MessageTooLargeError. Buffers are in native byte order,
 * which is what Arrow uses in memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static PyObject *CorruptRecordError;
static PyObject *MessageTooLargeError;

/* ---- pooled memory blocks ----------------------------------------------------------------
 *
 * Column buffers are handed to pyarrow without a copy, so their memory lives until Arrow drops the
 * batch (in Spark's worker: right after writing it to the JVM). Allocated fresh for every batch,
 * the large ones (a value column is ~8 MB) came from mmap each time: every page faulted and was
 * zeroed by the kernel, as costly as the copy itself. Freed blocks of at least POOL_MIN_BYTES are
 * kept here (bounded) and reused by the next batch, warm. Only ever touched with the GIL held. */

#define POOL_SLOTS 32
#define POOL_MIN_BYTES ((Py_ssize_t)64 * 1024)
#define POOL_MAX_BYTES ((Py_ssize_t)64 * 1024 * 1024)

static struct {
    char *data;
    Py_ssize_t cap;
} pool[POOL_SLOTS];
static int pool_count;
static Py_ssize_t pool_bytes;

/* The smallest pooled block of at least ``want`` bytes (NULL if none); its capacity in *cap. */
static char *pool_take(Py_ssize_t want, Py_ssize_t *cap) {
    int best = -1;
    for (int i = 0; i < pool_count; i++) {
        if (pool[i].cap >= want && (best < 0 || pool[i].cap < pool[best].cap))
            best = i;
    }
    if (best < 0)
        return NULL;
    char *data = pool[best].data;
    *cap = pool[best].cap;
    pool_bytes -= *cap;
    pool[best] = pool[--pool_count];
    return data;
}

static void pool_give(char *data, Py_ssize_t cap) {
    if (data == NULL)
        return;
    if (cap >= POOL_MIN_BYTES && pool_count < POOL_SLOTS && pool_bytes + cap <= POOL_MAX_BYTES) {
        pool[pool_count].data = data;
        pool[pool_count].cap = cap;
        pool_count++;
        pool_bytes += cap;
        return;
    }
    free(data);
}

/* A finished column buffer: exports its bytes through the buffer protocol (pyarrow.py_buffer wraps
 * it without a copy) and returns its memory to the pool when the last reference goes. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Block;

static int block_getbuffer(Block *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->len, 0, flags);
}

static void block_dealloc(Block *self) {
    pool_give(self->data, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t block_len(Block *self) { return self->len; }

static PyBufferProcs block_as_buffer = {
    .bf_getbuffer = (getbufferproc)block_getbuffer,
};

static PySequenceMethods block_as_sequence = {
    .sq_length = (lenfunc)block_len,
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "oncestream._native.record_columns.Block",
    .tp_doc = PyDoc_STR("One finished column buffer (buffer protocol; its memory is reused once it is dropped)."),
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_as_sequence = &block_as_sequence,
};

/* ---- growable buffer ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t hint; /* the length the previous batch reached: the next one starts at that size */
} Buf;

static void buf_init(Buf *b) {
    b->data = NULL;
    b->len = b->cap = b->hint = 0;
}

static int buf_reserve_slow(Buf *b, Py_ssize_t need) {
    Py_ssize_t start = b->hint + b->hint / 8; /* a little headroom over the previous batch */
    Py_ssize_t cap = b->cap ? b->cap : (start > 1024 ? start : 1024);
    while (cap < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *data;
    if (b->data == NULL) {
        Py_ssize_t got;
        data = pool_take(cap, &got);
        if (data != NULL)
            cap = got;
        else
            data = malloc((size_t)cap);
    } else {
        data = realloc(b->data, (size_t)cap);
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    Py_ssize_t need = b->len + extra;
    return need <= b->cap ? 0 : buf_reserve_slow(b, need);
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

/* Set bit ``index`` of a validity bitmap to ``valid`` (bits of new bytes start at zero). */
static inline int bit_put(Buf *b, Py_ssize_t index, int valid) {
    Py_ssize_t byte = index >> 3;
    if (byte >= b->len) {
        Py_ssize_t grow = byte + 1 - b->len;
        if (buf_reserve(b, grow) < 0)
            return -1;
        memset(b->data + b->len, 0, (size_t)grow);
        b->len = byte + 1;
    }
    if (valid)
        b->data[byte] |= (char)(1 << (index & 7));
    return 0;
}

/* Give the bytes away as a Block; ``b`` starts empty again, sized for as much next time. */
static PyObject *buf_take(Buf *b) {
    if (b->data == NULL && buf_reserve_slow(b, 1) < 0) /* a zero-length buffer still needs an address */
        return NULL;
    Block *block = PyObject_New(Block, &BlockType);
    if (block == NULL)
        return NULL;
    block->data = b->data;
    block->len = b->len;
    block->cap = b->cap;
    b->hint = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)block;
}

static void buf_free(Buf *b) {
    free(b->data);
    buf_init(b);
}

/* ---- a variable-length column: int32 offsets, data, validity ------------------------------ */

typedef struct {
    Buf offsets, data, valid;
    Py_ssize_t count, nulls;
} VarCol;

static int varcol_init(VarCol *c) {
    int32_t zero = 0;
    c->count = c->nulls = 0;
    buf_init(&c->offsets);
    buf_init(&c->data);
    buf_init(&c->valid);
    return buf_put(&c->offsets, &zero, 4);
}

static void varcol_clear(VarCol *c) {
    buf_free(&c->offsets);
    buf_free(&c->data);
    buf_free(&c->valid);
}

/* Record whether entry ``c->count`` is valid. The bitmap is only written once a null appears
 * (Arrow's "no validity buffer" means all valid): then the bits of the entries before it are set. */
static inline int validity_put(VarCol *c, int valid) {
    if (!valid && c->nulls++ == 0) {
        Py_ssize_t full = c->count >> 3, rest = c->count & 7;
        if (buf_reserve(&c->valid, full + 1) < 0)
            return -1;
        memset(c->valid.data, 0xFF, (size_t)full);
        c->valid.len = full;
        if (rest) {
            c->valid.data[full] = (char)((1 << rest) - 1);
            c->valid.len = full + 1;
        }
    }
    return c->nulls ? bit_put(&c->valid, c->count, valid) : 0;
}

/* Append one value (``n`` < 0: null). */
static int varcol_put(VarCol *c, const char *src, int64_t n) {
    if (n >= 0) {
        if ((int64_t)c->data.len + n > INT32_MAX) {
            PyErr_SetString(MessageTooLargeError, "a column of one Arrow batch would exceed 2 GiB");
            return -1;
        }
        if (buf_put(&c->data, src, (Py_ssize_t)n) < 0)
            return -1;
    }
    if (validity_put(c, n >= 0) < 0)
        return -1;
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, 4) < 0)
        return -1;
    c->count++;
    return 0;
}

/* (validity or None, null count, offsets, data); the column starts empty again. */
static PyObject *varcol_take(VarCol *c) {
    PyObject *valid, *offsets, *data;
    Py_ssize_t nulls = c->nulls;
    if (nulls) {
        valid = buf_take(&c->valid);
    } else {
        c->valid.len = 0;
        valid = Py_NewRef(Py_None);
    }
    offsets = buf_take(&c->offsets);
    data = buf_take(&c->data);
    if (valid == NULL || offsets == NULL || data == NULL) {
        Py_XDECREF(valid);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    int32_t zero = 0;
    c->count = c->nulls = 0;
    if (buf_put(&c->offsets, &zero, 4) < 0) {
        Py_DECREF(valid);
        Py_DECREF(offsets);
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NnNN)", valid, nulls, offsets, data);
}

/* ---- the builder -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t rows;
    Buf offsets;      /* int64 per row */
    Buf stamps_us;    /* int64 per row */
    Buf stamp_types;  /* int32 per row */
    VarCol keys, values;
    VarCol header_lists; /* data unused: offsets count header items; null when a record has none */
    VarCol header_keys, header_values;
} ColumnBuilder;

static int corrupt(const char *message) {
    PyErr_SetString(CorruptRecordError, message);
    return -1;
}

/* Kafka's zig-zag varlong at p[*pos], at most ten bytes, not reading at or past ``limit``. */
static inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out) {
    Py_ssize_t i = *pos;
    uint64_t raw = 0;
    int shift = 0;
    for (;;) {
        if (i >= limit || shift >= 70)
            return corrupt("truncated or overlong varint");
        uint8_t byte = p[i++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80))
            break;
        shift += 7;
    }
    *pos = i;
    *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    return 0;
}

static int put_header_key(ColumnBuilder *self, const uint8_t *src, int64_t n) {
    if (n < 0)
        return varcol_put(&self->header_keys, "", 0);
    int ascii = 1;
    for (int64_t i = 0; i < n; i++) {
        if (src[i] & 0x80) {
            ascii = 0;
            break;
        }
    }
    if (ascii)
        return varcol_put(&self->header_keys, (const char *)src, n);
    /* Not plain ASCII: let Python's UTF-8 codec validate it, replacing what is not UTF-8. */
    PyObject *text = PyUnicode_DecodeUTF8((const char *)src, (Py_ssize_t)n, "replace");
    if (text == NULL)
        return -1;
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    int rc = utf8 == NULL ? -1 : varcol_put(&self->header_keys, utf8, size);
    Py_DECREF(text);
    return rc;
}

static int builder_walk(ColumnBuilder *self, const uint8_t *p, Py_ssize_t size, int64_t record_count,
                        int64_t base_offset, int64_t base_ts, int64_t max_ts, int log_append,
                        int64_t position, int64_t end) {
    Py_ssize_t pos = 0;
    int32_t ts_type = log_append ? 1 : 0;
    for (int64_t i = 0; i < record_count; i++) {
        int64_t length, ts_delta, offset_delta;
        if (read_varint(p, &pos, size, &length) < 0)
            return -1;
        if (length < 0 || length > size - pos)
            return corrupt("record length out of bounds");
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* record attributes (unused) */
        /* Bounded by the section, not the record: a skipped record is not checked further. */
        if (read_varint(p, &pos, size, &ts_delta) < 0 || read_varint(p, &pos, size, &offset_delta) < 0)
            return -1;
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)offset_delta);
        if (offset < position || offset >= end) {
            pos = record_end;
            continue;
        }
        int64_t stamp_ms, stamp_us;
        if (log_append) {
            stamp_ms = max_ts;
        } else if (__builtin_add_overflow(base_ts, ts_delta, &stamp_ms)) {
            return corrupt("record timestamp out of range");
        }
        if (__builtin_mul_overflow(stamp_ms, (int64_t)1000, &stamp_us))
            return corrupt("record timestamp out of range");
        int64_t klen, vlen, count;
        const uint8_t *key = NULL, *value = NULL;
        if (read_varint(p, &pos, record_end, &klen) < 0)
            return -1;
        if (klen >= 0) {
            if (klen > record_end - pos)
                return corrupt("record length does not match its fields");
            key = p + pos;
            pos += (Py_ssize_t)klen;
        }
        if (read_varint(p, &pos, record_end, &vlen) < 0)
            return -1;
        if (vlen >= 0) {
            if (vlen > record_end - pos)
                return corrupt("record length does not match its fields");
            value = p + pos;
            pos += (Py_ssize_t)vlen;
        }
        if (read_varint(p, &pos, record_end, &count) < 0)
            return -1;
        for (int64_t h = 0; h < count; h++) {
            int64_t hk_len, hv_len;
            if (read_varint(p, &pos, record_end, &hk_len) < 0)
                return -1;
            if (hk_len > record_end - pos)
                return corrupt("record length does not match its fields");
            if (put_header_key(self, p + pos, hk_len) < 0)
                return -1;
            if (hk_len > 0)
                pos += (Py_ssize_t)hk_len;
            if (read_varint(p, &pos, record_end, &hv_len) < 0)
                return -1;
            if (hv_len > record_end - pos)
                return corrupt("record length does not match its fields");
            if (varcol_put(&self->header_values, (const char *)(p + pos), hv_len) < 0)
                return -1;
            if (hv_len > 0)
                pos += (Py_ssize_t)hv_len;
        }
        if (pos != record_end)
            return corrupt("record length does not match its fields");
        /* Header items were appended above; the list's end offset is their count so far. */
        Py_ssize_t items = self->header_keys.count;
        if (items > INT32_MAX) {
            PyErr_SetString(MessageTooLargeError, "too many headers for one Arrow batch");
            return -1;
        }
        VarCol *lists = &self->header_lists;
        int32_t list_end = (int32_t)items;
        if (validity_put(lists, count > 0) < 0 || buf_put(&lists->offsets, &list_end, 4) < 0)
            return -1;
        lists->count++;
        if (varcol_put(&self->keys, (const char *)key, klen) < 0 || varcol_put(&self->values, (const char *)value, vlen) < 0)
            return -1;
        if (buf_put(&self->offsets, &offset, 8) < 0 || buf_put(&self->stamps_us, &stamp_us, 8) < 0 ||
            buf_put(&self->stamp_types, &ts_type, 4) < 0)
            return -1;
        self->rows++;
    }
    return 0;
}

/* Undo a failed append: drop everything past the row count the batch started at. The simplest
 * correct way is to forget the whole builder's state; the reader raises anyway. */
static void builder_reset(ColumnBuilder *self);
static int builder_setup(ColumnBuilder *self);

PyDoc_STRVAR(append_doc,
"append(section, record_count, base_offset, base_timestamp_ms, max_timestamp_ms, log_append, position, end)\n"
"--\n\n"
"Append the records of one batch's decompressed records section whose offsets lie in\n"
"[position, end). Raises CorruptRecordError on malformed records (the builder is then empty).");

static PyObject *builder_append(ColumnBuilder *self, PyObject *args) {
    Py_buffer view;
    long long record_count, base_offset, base_ts, max_ts, position, end;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*LLLLpLL", &view, &record_count, &base_offset, &base_ts, &max_ts, &log_append,
                          &position, &end))
        return NULL;
    int rc = builder_walk(self, (const uint8_t *)view.buf, view.len, record_count, base_offset, base_ts, max_ts,
                          log_append, position, end);
    PyBuffer_Release(&view);
    if (rc < 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        builder_reset(self);
        if (builder_setup(self) < 0) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            return NULL;
        }
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(finish_doc,
"finish() -> (rows, offsets, timestamps_us, timestamp_types, keys, values, header_lists, header_keys,\n"
"header_values)\n--\n\n"
"The buffers gathered so far (Blocks: buffer-protocol objects in native byte order, given away\n"
"without a copy); the\n"
"builder starts empty again. keys, values, header_keys and header_values are (validity or None,\n"
"null count, int32 offsets, data); header_lists is (validity or None, null count, int32 offsets\n"
"into the header items, unused).");

static PyObject *builder_finish(ColumnBuilder *self, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t rows = self->rows;
    PyObject *offsets = buf_take(&self->offsets);
    PyObject *stamps = buf_take(&self->stamps_us);
    PyObject *types = buf_take(&self->stamp_types);
    PyObject *keys = varcol_take(&self->keys);
    PyObject *values = varcol_take(&self->values);
    PyObject *lists = varcol_take(&self->header_lists);
    PyObject *hkeys = varcol_take(&self->header_keys);
    PyObject *hvalues = varcol_take(&self->header_values);
    self->rows = 0;
    if (!offsets || !stamps || !types || !keys || !values || !lists || !hkeys || !hvalues) {
        Py_XDECREF(offsets);
        Py_XDECREF(stamps);
        Py_XDECREF(types);
        Py_XDECREF(keys);
        Py_XDECREF(values);
        Py_XDECREF(lists);
        Py_XDECREF(hkeys);
        Py_XDECREF(hvalues);
        return NULL;
    }
    return Py_BuildValue("(nNNNNNNNN)", rows, offsets, stamps, types, keys, values, lists, hkeys, hvalues);
}

static PyObject *builder_rows(ColumnBuilder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->rows);
}

static Py_ssize_t builder_len(ColumnBuilder *self) { return self->rows; }

static void builder_reset(ColumnBuilder *self) {
    self->rows = 0;
    buf_free(&self->offsets);
    buf_free(&self->stamps_us);
    buf_free(&self->stamp_types);
    varcol_clear(&self->keys);
    varcol_clear(&self->values);
    varcol_clear(&self->header_lists);
    varcol_clear(&self->header_keys);
    varcol_clear(&self->header_values);
}

static int builder_setup(ColumnBuilder *self) {
    self->rows = 0;
    buf_init(&self->offsets);
    buf_init(&self->stamps_us);
    buf_init(&self->stamp_types);
    if (varcol_init(&self->keys) < 0 || varcol_init(&self->values) < 0 || varcol_init(&self->header_lists) < 0 ||
        varcol_init(&self->header_keys) < 0 || varcol_init(&self->header_values) < 0)
        return -1;
    return 0;
}

static PyObject *builder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "ColumnBuilder() takes no arguments");
        return NULL;
    }
    ColumnBuilder *self = (ColumnBuilder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (builder_setup(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void builder_dealloc(ColumnBuilder *self) {
    builder_reset(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef builder_methods[] = {
    {"append", (PyCFunction)builder_append, METH_VARARGS, append_doc},
    {"finish", (PyCFunction)builder_finish, METH_NOARGS, finish_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_rows, NULL, "rows gathered since the last finish()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods builder_as_sequence = {
    .sq_length = (lenfunc)builder_len,
};

static PyTypeObject ColumnBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "oncestream._native.record_columns.ColumnBuilder",
    .tp_doc = PyDoc_STR("Arrow column buffers of the records of one Arrow batch (see the module docstring)."),
    .tp_basicsize = sizeof(ColumnBuilder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = builder_new,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
    .tp_as_sequence = &builder_as_sequence,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "oncestream._native.record_columns",
    .m_doc = PyDoc_STR("Kafka v2 records sections decoded into Arrow column buffers (hand-written: no maintained "
                       "library decodes them into columns; see the source's header comment)."),
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_record_columns(void) {
    PyObject *errors = PyImport_ImportModule("oncestream.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    MessageTooLargeError = PyObject_GetAttrString(errors, "MessageTooLargeError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || MessageTooLargeError == NULL)
        return NULL;
    if (PyType_Ready(&ColumnBuilderType) < 0 || PyType_Ready(&BlockType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "ColumnBuilder", (PyObject *)&ColumnBuilderType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
