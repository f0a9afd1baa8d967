/*
 * oncestream._native.tls_pump: the byte path of one established TLS connection, in C, the GIL
 * released for the whole life of the connection.
 *
 * Why: the Python pump (oncestream/broker/tls_pump.py, _Pump) calls SSLObject.read once per TLS
 * record, and each call releases and retakes the GIL that the event loop holds while it handles
 * requests. librdkafka's records average 2.9 KiB at 1 KiB values, so a 100 MB produce is ~35000
 * GIL hand-overs, each waiting for the loop to give the GIL up (docs/benchmarks.md, "TLS produce
 * is still below the goal"). Here Pump.run() releases the GIL once and keeps it released until
 * the connection ends: recv from the client -> every record that has arrived decrypted -> send
 * into the broker's socket pair, and recv from the pair (256 KiB) -> encrypted -> send to the
 * client, all in one poll() loop on this thread. The thread comes back to Python only when the
 * connection is over.
 *
 * Design choice: this code drives OpenSSL on the SSL* of Python's own ssl.SSLObject. The handshake,
 * the SSLContext built from the listener's PEM settings (broker/tls.py), the SNI callback and the
 * ConnectionOrigin (peer certificate as getpeercert() decodes it, cipher, version) all stay in
 * Python, exactly as on the fallback path; only the bytes after the handshake move here. The
 * alternative, a handshake in C with an SSL_CTX of its own, would need a second implementation of
 * every TLS setting the broker reads and of getpeercert()'s certificate decoding, for no speed.
 *
 * The price: the SSL* is a private field of CPython's _ssl._SSLSocket. Pump() therefore refuses
 * (raises UnknownLayout, and the Python pump runs instead) unless every one of these holds:
 *   - the object's type is _ssl._SSLSocket and its size is that of the struct mirrored below for
 *     this CPython minor version (3.11 and 3.12; any other version refuses);
 *   - the SSL* found at the mirrored offset has the object itself as its app data (CPython sets
 *     SSL_set_app_data(ssl, self) when it creates the SSL object), is a server and has finished its
 *     handshake;
 *   - openssl_shared_with(_ssl.__file__) said that _ssl resolves SSL_read to the very function this
 *     module calls, i.e. both use one loaded libssl (a Python with OpenSSL linked in statically
 *     would hand us an SSL* of another library's layout).
 * The memory BIOs stay the SSL object's (Python's MemoryBIO objects' BIO*s, reference counted by
 * the SSL object too). CPython's callbacks that OpenSSL may run during SSL_read (SNI on a TLS 1.2
 * renegotiation, the keylog and message callbacks) take the GIL themselves, as they must when
 * Python's own SSLObject.read runs them with the GIL released.
 *
 * The rules follow _Pump in tls_pump.py (the tests run both): every record that has arrived is
 * decrypted before the broker is handed any; at most PENDING_HIGH_BYTES of decrypted bytes wait for
 * the broker and of encrypted bytes for the client (past that the other socket is not read, so the
 * kernel's buffers push back); a bad record, an alert or a reset ends the client side (what was
 * decrypted before still reaches the broker, then the pair's write side is shut); when the broker
 * closes its end, what it wrote still goes out (at most linger_s) followed by close_notify; the
 * broker's close is seen (POLLRDHUP) also while the pair is not read because the client is behind,
 * so a client that stopped reading cannot hold the thread past linger_s (the Python pump does not
 * see that close until the client reads). One
 * SSL object is only ever used by the thread in run(): abort() (any thread) only sets a flag, and
 * the caller's shutdown of both sockets (TCP and pair) wakes poll() whichever of them it waits on.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* One recv (either socket) and one SSL_write take at most this much: 16 full TLS records. */
#define CHUNK_BYTES ((size_t)256 * 1024)
/* Decrypted bytes not yet taken by the broker, encrypted ones not yet taken by the client: past
 * this the socket feeding them is not read. */
#define PENDING_HIGH_BYTES ((size_t)1024 * 1024)
/* Decrypted bytes of an unfinished Kafka frame held back from the broker at most (see frames_seen). */
#define HOLD_BACK_BYTES ((size_t)256 * 1024)
/* A pump waiting on neither socket looks again after this long (not a state it reaches). */
#define NOTHING_AWAITED_MS 1000

static PyObject *UnknownLayout;

/* ---- CPython's _ssl._SSLSocket, as far as this module relies on it ----------------------- */

typedef struct {
    int ssl;
    int c;
} mirrored_error;

/* The fields both known versions share, in their order. */
#define MIRRORED_SSL_SOCKET_FIELDS \
    PyObject_HEAD \
    PyObject *Socket; \
    SSL *ssl; \
    PyObject *ctx; \
    char shutdown_seen_zero; \
    int socket_type; \
    PyObject *owner; \
    PyObject *server_hostname; \
    mirrored_error err;

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
typedef struct {
    MIRRORED_SSL_SOCKET_FIELDS
    PyObject *exc_type; /* 3.11: the exception a callback raised, in three parts */
    PyObject *exc_value;
    PyObject *exc_tb;
} mirrored_ssl_socket;
#define LAYOUT_KNOWN 1
#elif PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
typedef struct {
    MIRRORED_SSL_SOCKET_FIELDS
    PyObject *exc; /* 3.12: in one */
} mirrored_ssl_socket;
#define LAYOUT_KNOWN 1
#else
#define LAYOUT_KNOWN 0
#endif

/* Set by openssl_shared_with() once _ssl was found to use this module's libssl. */
static int openssl_shared;

static PyObject *openssl_shared_with(PyObject *module, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL)
        return NULL;
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    int same = 0;
    if (handle != NULL) {
        /* dlsym on a handle searches the object and its dependencies: an _ssl linked against the
         * shared libssl finds the SSL_read this module calls, a statically linked one its own. */
        same = dlsym(handle, "SSL_read") == (void *)&SSL_read
            && dlsym(handle, "SSL_get_ex_data") == (void *)&SSL_get_ex_data;
        dlclose(handle);
    }
    openssl_shared = same && LAYOUT_KNOWN;
    return PyBool_FromLong(openssl_shared);
}

/* The SSL* of an _ssl._SSLSocket after the guards above, or NULL with UnknownLayout set. */
static SSL *ssl_of(PyObject *obj) {
#if LAYOUT_KNOWN
    if (!openssl_shared) {
        PyErr_SetString(UnknownLayout, "_ssl was not found to share this module's libssl "
                                       "(openssl_shared_with() said no or was not called)");
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(obj);
    if (strcmp(type->tp_name, "_ssl._SSLSocket") != 0
        || type->tp_basicsize != (Py_ssize_t)sizeof(mirrored_ssl_socket)) {
        PyErr_Format(UnknownLayout, "%s of %zd bytes is not the _ssl._SSLSocket this module knows",
                     type->tp_name, type->tp_basicsize);
        return NULL;
    }
    SSL *ssl = ((mirrored_ssl_socket *)obj)->ssl;
    if (ssl == NULL || SSL_get_app_data(ssl) != (void *)obj) {
        PyErr_SetString(UnknownLayout, "the SSL object found is not this _SSLSocket's");
        return NULL;
    }
    if (!SSL_is_server(ssl) || !SSL_is_init_finished(ssl)) {
        PyErr_SetString(UnknownLayout, "the SSL object is not a server's with a finished handshake");
        return NULL;
    }
    if (SSL_get_rbio(ssl) == NULL || SSL_get_wbio(ssl) == NULL) {
        PyErr_SetString(UnknownLayout, "the SSL object has no memory BIOs");
        return NULL;
    }
    return ssl;
#else
    PyErr_SetString(UnknownLayout, "this CPython version's _ssl._SSLSocket layout is not known");
    return NULL;
#endif
}

/* ---- growable byte buffers --------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t start; /* first byte not yet consumed */
    size_t end;   /* one past the last byte */
    size_t cap;
} buffer;

static size_t buf_len(const buffer *b) { return b->end - b->start; }

static void buf_consume(buffer *b, size_t n) {
    b->start += n;
    if (b->start == b->end)
        b->start = b->end = 0;
}

/* Room for at least ``want`` more bytes at data + end; 0 on allocation failure. The unconsumed
 * bytes move to the front only when fewer remain than were consumed (so each byte moves at most
 * about once); otherwise the buffer grows. */
static int buf_reserve(buffer *b, size_t want) {
    if (b->start > 0 && b->cap - b->end < want && b->end - b->start <= b->start) {
        memmove(b->data, b->data + b->start, b->end - b->start);
        b->end -= b->start;
        b->start = 0;
    }
    if (b->cap - b->end >= want)
        return 1;
    size_t cap = b->cap ? b->cap : CHUNK_BYTES;
    while (cap - b->end < want)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
        return 0;
    b->data = data;
    b->cap = cap;
    return 1;
}

static void buf_free(buffer *b) {
    free(b->data);
    b->data = NULL;
    b->start = b->end = b->cap = 0;
}

/* ---- the pump ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* the _ssl._SSLSocket whose SSL* this is: kept alive while we use it */
    SSL *ssl;
    int raw_fd;  /* the client's TCP socket (non-blocking, owned by Python) */
    int pair_fd; /* our end of the broker's socket pair (non-blocking, owned by Python) */
    double linger_s;
    atomic_int aborted;
    int started;
    /* What the pump moved (read after run(); for tests and benchmarks). */
    unsigned long long records_read_calls; /* SSL_read calls that returned bytes */
    unsigned long long plaintext_in_bytes; /* decrypted from the client */
    unsigned long long plaintext_out_bytes; /* encrypted for the client */
} PumpObject;

/* The state of one run(), touched only by the pump's thread with the GIL released. */
typedef struct {
    PumpObject *p;
    SSL *ssl;
    BIO *rbio, *wbio;
    char *scratch;   /* one recv's bytes, from either socket */
    buffer to_plain; /* decrypted, not yet written into the pair */
    buffer to_raw;   /* encrypted, not yet sent to the client */
    int client_open;  /* the client may still send */
    int client_eof;   /* no more ciphertext will arrive (end of stream or an error) */
    int broker_open;  /* the broker may still write into the pair */
    int broker_hung_up; /* the broker closed its end (its last bytes may still be in the pair) */
    int pair_shut;    /* our write side of the pair is shut */
    short raw_ready, pair_ready; /* what each socket may be ready for (cleared on EAGAIN) */
    /* Kafka framing of the client's plaintext (frames_seen): */
    unsigned char size_prefix[4]; /* the current frame's size prefix as far as it arrived */
    int prefix_have;              /* its bytes so far; 4: the frame's body is being read */
    long long body_left;          /* bytes of the current frame's body not yet decrypted */
    int unframed;                 /* a negative size was seen: no more holding back */
    size_t held;                  /* bytes at the tail of to_plain held back (a frame's unfinished body) */
    int failed_errno; /* an allocation failure or poll() error ends the pump */
} run_state;

/* Kafka framing: everything a client sends on a Kafka listener is a sequence of frames, a
 * big-endian int32 size then that many bytes (requests; SASL v0 tokens too). librdkafka writes a
 * request buffer segment by segment, so a 1 MiB Produce arrives as ~350 TLS records spread over
 * time; handed to the broker record by record, each one wakes the event loop and resumes the
 * connection's readexactly() for 3 KiB. So the bytes of a frame that has not fully arrived are held
 * back (at most HOLD_BACK_BYTES, then released as they are) and the broker gets whole frames, in
 * the chunks a plaintext connection would give it. Holding back never delays the broker: it can do
 * nothing with part of a request. A negative size (not Kafka) stops the holding back for good; the
 * broker then closes the connection on reading it. This walks the n bytes just appended. */
static void frames_seen(run_state *s, const unsigned char *data, size_t n) {
    size_t i = 0;
    while (i < n && !s->unframed) {
        if (s->prefix_have < 4) {
            size_t start = i;
            while (s->prefix_have < 4 && i < n)
                s->size_prefix[s->prefix_have++] = data[i++];
            s->held += i - start;
            if (s->prefix_have < 4)
                break;
            int32_t size = (int32_t)(((uint32_t)s->size_prefix[0] << 24) | ((uint32_t)s->size_prefix[1] << 16)
                                     | ((uint32_t)s->size_prefix[2] << 8) | (uint32_t)s->size_prefix[3]);
            if (size < 0) {
                s->unframed = 1;
                break;
            }
            s->body_left = size;
            s->held = 0; /* the size prefix goes at once: the broker checks it (request size limits) */
        }
        size_t take = (size_t)s->body_left < n - i ? (size_t)s->body_left : n - i;
        s->body_left -= (long long)take;
        i += take;
        s->held += take;
        if (s->body_left == 0) { /* a whole frame: it and every frame before it may go */
            s->prefix_have = 0;
            s->held = 0;
        }
    }
    if (s->unframed || s->held >= HOLD_BACK_BYTES)
        s->held = 0;
}

/* Decrypted bytes that may go to the broker now. */
static size_t releasable(const run_state *s) {
    size_t pending = buf_len(&s->to_plain);
    if (!s->client_open || s->unframed)
        return pending; /* nothing more completes a frame: the broker gets everything */
    return pending - s->held;
}

static void client_gone(run_state *s) {
    s->client_open = 0;
    s->client_eof = 1;
    s->to_raw.start = s->to_raw.end = 0;
}

/* What the SSL object wrote (records, alerts, key-update answers) moved to to_raw, or dropped
 * when the client is gone. */
static int drain_wbio(run_state *s) {
    size_t pending;
    while ((pending = BIO_ctrl_pending(s->wbio)) > 0) {
        if (!s->client_open) {
            while (BIO_read(s->wbio, s->scratch, (int)CHUNK_BYTES) > 0) {
            }
            return 1;
        }
        if (!buf_reserve(&s->to_raw, pending)) {
            s->failed_errno = ENOMEM;
            return 0;
        }
        int got = BIO_read(s->wbio, s->to_raw.data + s->to_raw.end, (int)pending);
        if (got <= 0)
            break;
        s->to_raw.end += (size_t)got;
    }
    return 1;
}

/* What one non-blocking socket call did. */
enum io_result {
    IO_BLOCKED, /* it would block (or is known to): the socket is waited for */
    IO_RETRY,   /* interrupted by a signal */
    IO_ENDED,   /* end of stream, or an error: the peer is gone */
    IO_MOVED,   /* bytes moved (*moved of them) */
};

/* recv of at most CHUNK_BYTES into ``into`` from a socket that may be readable (``ready``); a short
 * read emptied the queue, so the next call is a poll, not a recv that fails. */
static enum io_result recv_some(int fd, char *into, short *ready, short *events, size_t *moved) {
    if (!(*ready & POLLIN)) {
        *events |= POLLIN;
        return IO_BLOCKED;
    }
    ssize_t got = recv(fd, into, CHUNK_BYTES, 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        *ready &= ~POLLIN;
        *events |= POLLIN;
        return IO_BLOCKED;
    }
    if (got < 0 && errno == EINTR)
        return IO_RETRY;
    if (got <= 0)
        return IO_ENDED;
    if ((size_t)got < CHUNK_BYTES)
        *ready &= ~POLLIN;
    *moved = (size_t)got;
    return IO_MOVED;
}

/* send of the first ``size`` bytes of ``from`` to a socket that may be writable (``ready``). */
static enum io_result send_some(int fd, buffer *from, size_t size, short *ready, short *events) {
    if (!(*ready & POLLOUT)) {
        *events |= POLLOUT;
        return IO_BLOCKED;
    }
    ssize_t sent = send(fd, from->data + from->start, size, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        *ready &= ~POLLOUT;
        *events |= POLLOUT;
        return IO_BLOCKED;
    }
    if (sent < 0 && errno == EINTR)
        return IO_RETRY;
    if (sent < 0)
        return IO_ENDED;
    buf_consume(from, (size_t)sent);
    return IO_MOVED;
}

/* Move bytes until nothing moves; sets what each socket waits for. 0: the pump must end now. */
static int transfer(run_state *s, short *raw_events, short *pair_events) {
    for (;;) {
        int progress = 0;
        size_t got = 0;
        enum io_result result;
        *raw_events = *pair_events = 0;
        /* ciphertext from the client into the SSL object's read BIO */
        if (s->client_open && !s->client_eof && buf_len(&s->to_plain) < PENDING_HIGH_BYTES) {
            result = recv_some(s->p->raw_fd, s->scratch, &s->raw_ready, raw_events, &got);
            if (result == IO_ENDED) /* end of stream, or a reset: what arrived is still decrypted */
                s->client_eof = 1;
            if (result == IO_MOVED && BIO_write(s->rbio, s->scratch, (int)got) != (int)got) {
                s->failed_errno = ENOMEM;
                return 0;
            }
            progress |= result != IO_BLOCKED;
        }
        /* every record that has arrived decrypted before the broker is handed any */
        int starved = 0; /* the read BIO holds no whole record */
        while (s->client_open && buf_len(&s->to_plain) < PENDING_HIGH_BYTES) {
            if (BIO_ctrl_pending(s->rbio) == 0 && SSL_pending(s->ssl) == 0) {
                starved = 1;
                break;
            }
            /* room for a whole record's plaintext: none stays inside OpenSSL */
            if (!buf_reserve(&s->to_plain, SSL3_RT_MAX_PLAIN_LENGTH)) {
                s->failed_errno = ENOMEM;
                return 0;
            }
            size_t plain = 0;
            ERR_clear_error();
            if (SSL_read_ex(s->ssl, s->to_plain.data + s->to_plain.end, s->to_plain.cap - s->to_plain.end, &plain)) {
                frames_seen(s, (const unsigned char *)s->to_plain.data + s->to_plain.end, plain);
                s->to_plain.end += plain;
                s->p->records_read_calls++;
                s->p->plaintext_in_bytes += plain;
                progress = 1;
                continue;
            }
            int err = SSL_get_error(s->ssl, 0);
            ERR_clear_error();
            if (err == SSL_ERROR_WANT_READ) {
                starved = 1; /* a partial record: the rest is still on its way */
                break;
            }
            /* close_notify, a bad record, an alert: nothing more comes from the client */
            s->client_open = 0;
            progress = 1;
            break;
        }
        if (s->client_open && s->client_eof && starved)
            s->client_open = 0; /* the TCP stream ended (anything left is a truncated record) */
        /* plaintext into the pair */
        size_t ready_bytes = releasable(s);
        if (ready_bytes) {
            result = send_some(s->p->pair_fd, &s->to_plain, ready_bytes, &s->pair_ready, pair_events);
            if (result == IO_ENDED) { /* the broker closed its end: nothing more goes to it */
                s->to_plain.start = s->to_plain.end = 0;
                s->held = 0;
                s->unframed = 1;
                s->broker_open = 0;
            }
            progress |= result != IO_BLOCKED;
        }
        /* what the broker wrote, encrypted */
        if (s->broker_open && buf_len(&s->to_raw) < PENDING_HIGH_BYTES) {
            result = recv_some(s->p->pair_fd, s->scratch, &s->pair_ready, pair_events, &got);
            if (result == IO_ENDED)
                s->broker_open = 0;
            if (result == IO_MOVED && s->client_open) { /* else: the client is gone, the bytes have nowhere to go */
                size_t written = 0;
                ERR_clear_error();
                if (SSL_write_ex(s->ssl, s->scratch, got, &written)) {
                    s->p->plaintext_out_bytes += written;
                } else { /* the SSL object failed (a fatal alert before): the client is done */
                    ERR_clear_error();
                    client_gone(s);
                }
            }
            progress |= result != IO_BLOCKED;
        }
        if (!drain_wbio(s))
            return 0;
        /* ciphertext to the client */
        if (buf_len(&s->to_raw)) {
            result = send_some(s->p->raw_fd, &s->to_raw, buf_len(&s->to_raw), &s->raw_ready, raw_events);
            if (result == IO_ENDED) /* the client is gone */
                client_gone(s);
            progress |= result != IO_BLOCKED;
        }
        if (!progress)
            return 1;
    }
}

/* Our close_notify, sent if the socket takes it now; the client's is not awaited (Kafka does not). */
static void close_notify(run_state *s) {
    ERR_clear_error();
    (void)SSL_shutdown(s->ssl);
    ERR_clear_error();
    if (!drain_wbio(s) || !s->client_open)
        return;
    while (buf_len(&s->to_raw)) {
        ssize_t sent = send(s->p->raw_fd, s->to_raw.data + s->to_raw.start, buf_len(&s->to_raw), MSG_NOSIGNAL);
        if (sent <= 0)
            return; /* best effort: never wait for it */
        buf_consume(&s->to_raw, (size_t)sent);
    }
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The whole pump, without the GIL. Returns why it ended (a static string). */
static const char *pump_loop(run_state *s) {
    double linger_until_s = 0.0;
    while (!atomic_load(&s->p->aborted)) {
        short raw_events, pair_events;
        if (!transfer(s, &raw_events, &pair_events))
            return "failed";
        if (!s->broker_open && !buf_len(&s->to_raw)) {
            close_notify(s);
            return "broker closed"; /* and everything it wrote went out */
        }
        if (!s->client_open && !buf_len(&s->to_plain)) {
            if (!s->pair_shut) {
                shutdown(s->p->pair_fd, SHUT_WR); /* the broker reads end-of-stream */
                s->pair_shut = 1;
            }
            if (!s->broker_open)
                return "client closed";
            raw_events = 0; /* nothing more goes to the client: wait for the broker to close */
            pair_events = POLLIN;
        }
        int timeout_ms = -1;
        if (s->broker_open && !s->broker_hung_up && !(pair_events & POLLIN))
            pair_events |= POLLRDHUP; /* not reading the pair (the client is behind): see the broker close */
        if (!s->broker_open || s->broker_hung_up) { /* flushing to a client that may have stopped reading */
            double now_s = monotonic_s();
            if (linger_until_s == 0.0)
                linger_until_s = now_s + s->p->linger_s;
            if (now_s >= linger_until_s)
                return "linger expired";
            timeout_ms = (int)((linger_until_s - now_s) * 1000.0) + 1;
        }
        struct pollfd fds[2] = {
            {.fd = raw_events ? s->p->raw_fd : -1, .events = raw_events},
            {.fd = pair_events ? s->p->pair_fd : -1, .events = pair_events},
        };
        if (!raw_events && !pair_events && timeout_ms < 0)
            timeout_ms = NOTHING_AWAITED_MS;
        int ready = poll(fds, 2, timeout_ms);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            s->failed_errno = errno;
            return "failed";
        }
        /* an error or hang-up counts as ready for both: the next call finds out what happened */
        if (fds[0].revents)
            s->raw_ready |= (fds[0].revents & (POLLERR | POLLHUP)) ? (POLLIN | POLLOUT) : fds[0].revents;
        if (fds[1].revents & (POLLRDHUP | POLLHUP))
            s->broker_hung_up = 1;
        if (fds[1].revents)
            s->pair_ready |= (fds[1].revents & (POLLERR | POLLHUP)) ? (POLLIN | POLLOUT) : fds[1].revents;
    }
    return "aborted";
}

static PyObject *pump_run(PumpObject *self, PyObject *unused) {
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "a Pump runs once");
        return NULL;
    }
    self->started = 1;
    run_state s = {0};
    s.p = self;
    s.ssl = self->ssl;
    s.rbio = SSL_get_rbio(self->ssl);
    s.wbio = SSL_get_wbio(self->ssl);
    s.client_open = s.broker_open = 1;
    s.raw_ready = s.pair_ready = POLLIN | POLLOUT;
    s.scratch = malloc(CHUNK_BYTES);
    if (s.scratch == NULL)
        return PyErr_NoMemory();
    const char *why;
    Py_BEGIN_ALLOW_THREADS
    why = pump_loop(&s);
    Py_END_ALLOW_THREADS
    free(s.scratch);
    buf_free(&s.to_plain);
    buf_free(&s.to_raw);
    if (s.failed_errno == ENOMEM)
        return PyErr_NoMemory();
    if (s.failed_errno) {
        errno = s.failed_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyUnicode_FromString(why);
}

static PyObject *pump_abort(PumpObject *self, PyObject *unused) {
    atomic_store(&self->aborted, 1);
    Py_RETURN_NONE;
}

static int pump_init(PumpObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"ssl_socket", "raw_fd", "pair_fd", "linger_s", NULL};
    PyObject *owner;
    int raw_fd, pair_fd;
    double linger_s;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oiid", keywords, &owner, &raw_fd, &pair_fd, &linger_s))
        return -1;
    if (self->owner != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Pump is initialised once");
        return -1;
    }
    SSL *ssl = ssl_of(owner);
    if (ssl == NULL)
        return -1;
    Py_INCREF(owner);
    self->owner = owner;
    self->ssl = ssl;
    self->raw_fd = raw_fd;
    self->pair_fd = pair_fd;
    self->linger_s = linger_s;
    atomic_init(&self->aborted, 0);
    return 0;
}

static void pump_dealloc(PumpObject *self) {
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pump_get_records_read_calls(PumpObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->records_read_calls);
}

static PyObject *pump_get_plaintext_in_bytes(PumpObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->plaintext_in_bytes);
}

static PyObject *pump_get_plaintext_out_bytes(PumpObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->plaintext_out_bytes);
}

PyDoc_STRVAR(run_doc, "run() -> str\n\nPump until the connection ends, without the GIL; returns why it ended "
                      "('broker closed', 'client closed', 'linger expired', 'aborted'). Raises OSError or "
                      "MemoryError when the pump itself fails. Runs once.");
PyDoc_STRVAR(abort_doc, "abort()\n\nAsk a running pump to end (any thread); the caller then shuts both sockets "
                        "(TCP and pair) down, which wakes it whichever one it waits on.");

static PyMethodDef pump_methods[] = {
    {"run", (PyCFunction)pump_run, METH_NOARGS, run_doc},
    {"abort", (PyCFunction)pump_abort, METH_NOARGS, abort_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pump_getset[] = {
    {"records_read_calls", (getter)pump_get_records_read_calls, NULL,
     PyDoc_STR("SSL_read calls that returned plaintext (about one per TLS record)"), NULL},
    {"plaintext_in_bytes", (getter)pump_get_plaintext_in_bytes, NULL, PyDoc_STR("bytes decrypted from the client"),
     NULL},
    {"plaintext_out_bytes", (getter)pump_get_plaintext_out_bytes, NULL,
     PyDoc_STR("bytes of the broker's encrypted for the client"), NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PumpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "oncestream._native.tls_pump.Pump",
    .tp_basicsize = sizeof(PumpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Pump(ssl_socket, raw_fd, pair_fd, linger_s): the byte path of one established "
                        "TLS connection (ssl_socket: an ssl.SSLObject's _sslobj, server side, handshake "
                        "done; both sockets non-blocking). Raises UnknownLayout when the SSL object "
                        "cannot be used from C (see the module's source)."),
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)pump_init,
    .tp_dealloc = (destructor)pump_dealloc,
    .tp_methods = pump_methods,
    .tp_getset = pump_getset,
};

PyDoc_STRVAR(shared_doc, "openssl_shared_with(ssl_module_path) -> bool\n\nWhether the _ssl extension at that path "
                         "uses the libssl this module calls (and this CPython's _SSLSocket layout is known); "
                         "Pump() refuses until this said yes.");

static PyMethodDef module_methods[] = {
    {"openssl_shared_with", (PyCFunction)openssl_shared_with, METH_O, shared_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "oncestream._native.tls_pump",
    .m_doc = PyDoc_STR("The byte path of an established TLS connection in C, the GIL released while it runs "
                       "(see the source's header comment for why and for the guards)."),
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit_tls_pump(void) {
    if (PyType_Ready(&PumpType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    UnknownLayout = PyErr_NewExceptionWithDoc(
        "oncestream._native.tls_pump.UnknownLayout",
        "The SSL object cannot be driven from C here (unknown CPython layout, another libssl).", PyExc_RuntimeError,
        NULL);
    if (UnknownLayout == NULL || PyModule_AddObjectRef(module, "UnknownLayout", UnknownLayout) < 0
        || PyModule_AddObjectRef(module, "Pump", (PyObject *)&PumpType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
