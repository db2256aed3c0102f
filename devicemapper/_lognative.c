/*
 * The per-entry loops of a dm-log-writes log in compiled code: the header walk that
 * indexes a log (devicemapper.logindex) and the payload copy of a replay
 * (devicemapper.replay). devicemapper/native.py says why this is a plain C extension
 * and how Python uses it; the log format is described in devicemapper/logformat.py.
 *
 * Python keeps every decision and every message. These functions never raise for a
 * bad log or a failed write: they stop and return (code, entry index, byte offset,
 * errno, ...), and Python builds the same one-line error its own path raises. The
 * GIL is released around all I/O.
 *
 * An index holds five native uint64 per entry (an array('Q')): sector, nr_sectors,
 * flags, data_len, header offset. Target offsets are computed in
 * 128 bits, as Python's integers would: a corrupt sector times the sector size must
 * not wrap around to a plausible offset.
 */

#include "_lognative.h"

struct failure {
    int code;
    int err;
    uint64_t index;
    u128 offset;
    uint64_t a, b;
};

static void fail(struct failure *f, int code, uint64_t index, u128 offset, int err, uint64_t a,
                 uint64_t b)
{
    f->code = code;
    f->index = index;
    f->offset = offset;
    f->err = err;
    f->a = a;
    f->b = b;
}

PyObject *long_from_u128(u128 v)
{
    if (v <= ULLONG_MAX)
        return PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *sixty_four = PyLong_FromLong(64);
    PyObject *shifted = NULL, *out = NULL;
    if (hi && lo && sixty_four && (shifted = PyNumber_Lshift(hi, sixty_four)))
        out = PyNumber_Or(shifted, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sixty_four);
    Py_XDECREF(shifted);
    return out;
}

/* None, or (code, index, offset, errno, a, b). */
static PyObject *failure_tuple(const struct failure *f)
{
    if (f->code == E_OK)
        Py_RETURN_NONE;
    PyObject *offset = long_from_u128(f->offset);
    if (!offset)
        return NULL;
    return Py_BuildValue("(iKNiKK)", f->code, (unsigned long long)f->index, offset, f->err,
                         (unsigned long long)f->a, (unsigned long long)f->b);
}

/* pread until len bytes or end of file; 0 or errno; *got is what arrived. */
static int pread_full(int fd, unsigned char *buf, size_t len, uint64_t off, size_t *got)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            *got = done;
            return errno;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return 0;
}

static uint64_t le64_at(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return le64toh(v);
}

int u64s_push(struct u64s *a, const uint64_t *items, size_t n)
{
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->len + n)
            cap *= 2;
        uint64_t *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    memcpy(a->v + a->len, items, n * sizeof *items);
    a->len += n;
    return 0;
}

/* ---- the header walk ---------------------------------------------------------------- */

struct walk {
    int fd;
    uint64_t size, sectorsize, nr_entries, window;
    uint64_t index, offset, stop;
    /* The read-ahead window over the log, as LogReader keeps one. */
    unsigned char *win;
    uint64_t win_off;
    size_t win_len;
    int large_gap;
    struct u64s records;
    struct u64s marks; /* (index, offset into text, length) */
    unsigned char *text;
    size_t text_len, text_cap;
    struct failure failure;
    int oom;
};

static int keep_mark(struct walk *w, uint64_t index, const unsigned char *p, size_t n)
{
    if (w->text_len + n > w->text_cap) {
        size_t cap = w->text_cap ? w->text_cap : 4096;
        while (cap < w->text_len + n)
            cap *= 2;
        unsigned char *t = realloc(w->text, cap);
        if (!t)
            return -1;
        w->text = t;
        w->text_cap = cap;
    }
    memcpy(w->text + w->text_len, p, n);
    uint64_t mark[3] = {index, w->text_len, n};
    w->text_len += n;
    return u64s_push(&w->marks, mark, 3);
}

/* Index entry w->index, whose header is at w->offset, and move w->offset past it: 0, or
 * -1 when it cannot be accepted (or memory ran out). Mirrors LogReader.read_entry and
 * its read-ahead window; Python parses a rejected header again to raise the reference
 * error. */
static int walk_one(struct walk *w)
{
    const uint64_t S = w->sectorsize;
    const uint64_t off = w->offset;
    if (w->index >= w->nr_entries || off >= w->size) {
        fail(&w->failure, E_HEADER, w->index, off, 0, 0, 0);
        return -1;
    }
    const unsigned char *block;
    size_t have;
    if (w->win_len && off >= w->win_off && off - w->win_off + S <= w->win_len) {
        block = w->win + (off - w->win_off);
        have = S;
    } else {
        /* After a large payload the next header is read alone, so big entries are not
         * read twice; small entries share one window. */
        size_t got;
        int err = pread_full(w->fd, w->win, w->large_gap ? S : w->window, off, &got);
        if (err) {
            fail(&w->failure, E_READ, w->index, off, err, 0, 0);
            return -1;
        }
        w->win_off = off;
        w->win_len = got;
        block = w->win;
        have = got < S ? got : S;
    }
    if (have < S) {
        fail(&w->failure, E_HEADER, w->index, off, 0, 0, 0);
        return -1;
    }
    const uint64_t sector = le64_at(block), nr = le64_at(block + 8);
    const uint64_t flags = le64_at(block + 16), data_len = le64_at(block + 24);
    if ((flags & ~(uint64_t)F_KNOWN) || (flags == 0 && nr == 0) || data_len > S - ENTRY_BYTES) {
        fail(&w->failure, E_HEADER, w->index, off, 0, 0, 0);
        return -1;
    }
    /* Only a mark's data_len counts text; the rest of the block must be zero. */
    for (uint64_t i = ENTRY_BYTES + ((flags & F_MARK) ? data_len : 0); i < S; i++) {
        if (block[i]) {
            fail(&w->failure, E_HEADER, w->index, off, 0, 0, 0);
            return -1;
        }
    }
    const uint64_t payload_off = off + S; /* <= size: the whole block was read */
    uint64_t payload_len = 0;
    if (!(flags & F_DISCARD)) {
        if (nr > (w->size - payload_off) / S) {
            fail(&w->failure, E_HEADER, w->index, off, 0, 0, 0);
            return -1;
        }
        payload_len = nr * S;
    }
    w->large_gap = payload_len >= w->window / 8;
    const uint64_t record[R_FIELDS] = {sector, nr, flags, data_len, off};
    if (u64s_push(&w->records, record, R_FIELDS) ||
        ((flags & F_MARK) && keep_mark(w, w->index, block + ENTRY_BYTES, data_len))) {
        w->oom = 1;
        return -1;
    }
    w->offset = payload_off + payload_len;
    return 0;
}

static int walk_begin(struct walk *w)
{
    if (w->sectorsize < 512 || w->sectorsize > 65536 || (w->sectorsize & (w->sectorsize - 1))) {
        PyErr_SetString(PyExc_ValueError, "bad sectorsize");
        return -1;
    }
    if (w->window < w->sectorsize)
        w->window = w->sectorsize;
    w->win = malloc(w->window);
    if (!w->win) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void walk_end(struct walk *w)
{
    free(w->win);
    free(w->records.v);
    free(w->marks.v);
    free(w->text);
}

/* The records as bytes and the marks as [(index, text bytes)]; 0 or -1 (exception set). */
static int walk_results(struct walk *w, PyObject **records, PyObject **marks)
{
    if (w->oom) {
        PyErr_NoMemory();
        return -1;
    }
    *records = PyBytes_FromStringAndSize((const char *)w->records.v,
                                         (Py_ssize_t)(w->records.len * sizeof(uint64_t)));
    *marks = PyList_New(0);
    if (!*records || !*marks)
        return -1;
    for (size_t i = 0; i < w->marks.len; i += 3) {
        /* Only empty marks before it: no text buffer yet, and y# turns NULL into None. */
        const char *text = w->text ? (const char *)w->text + w->marks.v[i + 1] : "";
        PyObject *item = Py_BuildValue("(Ky#)", (unsigned long long)w->marks.v[i], text,
                                       (Py_ssize_t)w->marks.v[i + 2]);
        if (!item || PyList_Append(*marks, item)) {
            Py_XDECREF(item);
            return -1;
        }
        Py_DECREF(item);
    }
    return 0;
}

PyDoc_STRVAR(walk_doc,
             "walk(fd, size, sectorsize, nr_entries, index, offset, stop, window)\n"
             "-> (records, marks, index, offset, failure)\n\n"
             "Headers of entries index..stop-1, the first at byte offset: records as bytes\n"
             "(5 uint64 each), marks as [(index, text bytes)], where the walk stopped, and\n"
             "None or the failure that stopped it.");

static PyObject *py_walk(PyObject *self, PyObject *args)
{
    struct walk w;
    memset(&w, 0, sizeof w);
    if (!PyArg_ParseTuple(args, "iKKKKKKK", &w.fd, &w.size, &w.sectorsize, &w.nr_entries,
                          &w.index, &w.offset, &w.stop, &w.window))
        return NULL;
    if (walk_begin(&w))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    for (; w.index < w.stop; w.index++) {
        if (walk_one(&w))
            break;
    }
    Py_END_ALLOW_THREADS
    PyObject *out = NULL, *records = NULL, *marks = NULL, *failure = NULL;
    if (!walk_results(&w, &records, &marks) && (failure = failure_tuple(&w.failure)))
        out = Py_BuildValue("(OOKKO)", records, marks, (unsigned long long)w.index,
                            (unsigned long long)w.offset, failure);
    Py_XDECREF(records);
    Py_XDECREF(marks);
    Py_XDECREF(failure);
    walk_end(&w);
    return out;
}

/* ---- the replay loop ------------------------------------------------------------------ */

struct queued {
    uint64_t log_off, len, index;
    u128 target_off;
};

/* Mirrors replay._Applier: writes queue until their log span would outgrow the buffer
 * or skip too far; a span is read with one pread and written as runs of pieces adjacent
 * on the target, one pwritev each. */
struct applier {
    int log_fd, target_fd;
    unsigned char *buf;
    uint64_t cap, gap;
    int iov_max;
    struct queued *queue;
    size_t qlen, qcap;
    uint64_t span_start, span_end;
    struct iovec *iov;
    uint64_t bytes_written;
    struct failure failure;
    int oom;
};

static int read_into(struct applier *a, unsigned char *buf, uint64_t len, uint64_t off,
                     uint64_t index)
{
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = pread(a->log_fd, buf + got, len - got, (off_t)(off + got));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail(&a->failure, E_READ, index, off + got, errno, 0, 0);
            return -1;
        }
        if (n == 0) {
            fail(&a->failure, E_SHORT, index, off + got, 0, got, len);
            return -1;
        }
        got += (uint64_t)n;
    }
    return 0;
}

static int write_run(struct applier *a, struct iovec *iov, int n, u128 offset, uint64_t index)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (offset + total > MAX_OFFSET) {
        fail(&a->failure, E_BEYOND, index, offset, 0, total, 0);
        return -1;
    }
    uint64_t done = 0;
    while (done < total) {
        ssize_t w = pwritev(a->target_fd, iov, n, (off_t)(offset + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fail(&a->failure, E_WRITE, index, offset, w < 0 ? errno : ENOSPC, total, 0);
            return -1;
        }
        done += (uint64_t)w;
        /* A short gathered write (signal, device end): go on after what was written. */
        while (n > 0 && (uint64_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (unsigned char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    a->bytes_written += total;
    return 0;
}

static int flush(struct applier *a)
{
    if (!a->qlen)
        return 0;
    const size_t qlen = a->qlen;
    a->qlen = 0;
    const uint64_t base = a->span_start;
    if (read_into(a, a->buf, a->span_end - base, base, a->queue[0].index))
        return -1;
    int n = 0;
    u128 run_start = 0, run_end = 0;
    uint64_t run_index = a->queue[0].index;
    for (size_t i = 0; i < qlen; i++) {
        const struct queued *q = &a->queue[i];
        struct iovec piece = {a->buf + (q->log_off - base), q->len};
        if (n && q->target_off == run_end && n < a->iov_max) {
            a->iov[n++] = piece;
            run_end += q->len;
            continue;
        }
        if (n && write_run(a, a->iov, n, run_start, run_index))
            return -1;
        a->iov[0] = piece;
        n = 1;
        run_start = q->target_off;
        run_end = q->target_off + q->len;
        run_index = q->index;
    }
    if (n && write_run(a, a->iov, n, run_start, run_index))
        return -1;
    return 0;
}

static int stream(struct applier *a, uint64_t log_off, uint64_t len, u128 target_off,
                  uint64_t index)
{
    for (uint64_t done = 0; done < len;) {
        uint64_t n = len - done < a->cap ? len - done : a->cap;
        if (read_into(a, a->buf, n, log_off + done, index))
            return -1;
        struct iovec piece = {a->buf, n};
        if (write_run(a, &piece, 1, target_off + done, index))
            return -1;
        done += n;
    }
    return 0;
}

static int enqueue(struct applier *a, uint64_t log_off, uint64_t len, u128 target_off,
                   uint64_t index)
{
    if (len > a->cap) {
        if (flush(a))
            return -1;
        return stream(a, log_off, len, target_off, index);
    }
    if (a->qlen && (log_off < a->span_end || log_off - a->span_end > a->gap ||
                    log_off + len - a->span_start > a->cap)) {
        if (flush(a))
            return -1;
    }
    if (!a->qlen)
        a->span_start = a->span_end = log_off;
    if (a->qlen == a->qcap) {
        size_t cap = a->qcap ? a->qcap * 2 : 256;
        struct queued *q = realloc(a->queue, cap * sizeof *q);
        if (!q) {
            a->oom = 1;
            return -1;
        }
        a->queue = q;
        a->qcap = cap;
    }
    a->queue[a->qlen++] = (struct queued){log_off, len, index, target_off};
    a->span_end = log_off + len;
    return 0;
}

struct replay {
    const uint64_t *records;
    uint64_t nrecords, sectorsize, start, stop;
    const uint64_t *pieces; /* (index, first sector, sectors) triples, or NULL */
    uint64_t npieces;
    int discard, final_flush;
    uint64_t next, entries;
};

/* Entries start..stop-1 (stopping before a discard, which Python applies), or exactly
 * the given pieces. */
static void replay_entries(struct applier *a, struct replay *r)
{
    const uint64_t S = r->sectorsize;
    if (r->pieces) {
        for (uint64_t p = 0; p < r->npieces; p++) {
            const uint64_t *piece = r->pieces + 3 * p;
            const uint64_t *rec = r->records + R_FIELDS * piece[0];
            if (enqueue(a, rec[R_HEADER] + S + piece[1] * S, piece[2] * S,
                        ((u128)rec[R_SECTOR] + piece[1]) * S, piece[0]))
                return;
        }
        flush(a);
        return;
    }
    for (r->next = r->start; r->next < r->stop; r->next++) {
        const uint64_t *rec = r->records + R_FIELDS * r->next;
        if (rec[R_FLAGS] & F_DISCARD) {
            if (r->discard) {
                flush(a);
                return;
            }
        } else if (rec[R_NR]) {
            if (enqueue(a, rec[R_HEADER] + S, rec[R_NR] * S, (u128)rec[R_SECTOR] * S, r->next))
                return;
        }
        r->entries++;
    }
    /* Without the final flush, only what Python's applier writes before it reads the
     * next header is written: what it does when that header is bad. */
    if (r->final_flush)
        flush(a);
}

PyDoc_STRVAR(apply_doc,
             "apply(log_fd, target_fd, records, sectorsize, start, stop, buffer, iov_max,\n"
             "      gap, discard, final_flush, pieces) -> (next, entries, bytes_written,\n"
             "      failure)\n\n"
             "Write entries start..stop-1 of the index records onto target_fd, through the\n"
             "writable buffer; with discard, stop before the first discard (next is its\n"
             "index); without final_flush, leave the last span unwritten. With pieces\n"
             "(bytes of (index, first sector, sectors) uint64 triples) write exactly those\n"
             "pieces instead.");

static PyObject *py_apply(PyObject *self, PyObject *args)
{
    struct applier a;
    struct replay r;
    Py_buffer records, buffer, pieces;
    PyObject *pieces_obj;
    memset(&a, 0, sizeof a);
    memset(&r, 0, sizeof r);
    if (!PyArg_ParseTuple(args, "iiy*KKKw*iKppO", &a.log_fd, &a.target_fd, &records,
                          &r.sectorsize, &r.start, &r.stop, &buffer, &a.iov_max, &a.gap,
                          &r.discard, &r.final_flush, &pieces_obj))
        return NULL;
    int have_pieces = pieces_obj != Py_None;
    if (have_pieces && PyObject_GetBuffer(pieces_obj, &pieces, PyBUF_SIMPLE)) {
        PyBuffer_Release(&records);
        PyBuffer_Release(&buffer);
        return NULL;
    }
    PyObject *out = NULL;
    r.records = records.buf;
    r.nrecords = (uint64_t)records.len / (R_FIELDS * sizeof(uint64_t));
    a.buf = buffer.buf;
    a.cap = (uint64_t)buffer.len;
    if (have_pieces) {
        r.pieces = pieces.buf;
        r.npieces = (uint64_t)pieces.len / (3 * sizeof(uint64_t));
        for (uint64_t p = 0; p < r.npieces; p++) {
            if (r.pieces[3 * p] >= r.nrecords) {
                PyErr_SetString(PyExc_ValueError, "a piece names an entry not in the index");
                goto done;
            }
        }
    }
    if (r.start > r.stop || r.stop > r.nrecords || a.cap < r.sectorsize || a.iov_max < 1 ||
        r.sectorsize < 512) {
        PyErr_SetString(PyExc_ValueError, "bad range, buffer or sector size");
        goto done;
    }
    a.iov = malloc((size_t)a.iov_max * sizeof *a.iov);
    if (!a.iov) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    replay_entries(&a, &r);
    Py_END_ALLOW_THREADS
    if (a.oom) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *failure = failure_tuple(&a.failure);
    if (failure)
        out = Py_BuildValue("(KKKN)", (unsigned long long)r.next, (unsigned long long)r.entries,
                            (unsigned long long)a.bytes_written, failure);
done:
    free(a.iov);
    free(a.queue);
    PyBuffer_Release(&records);
    PyBuffer_Release(&buffer);
    if (have_pieces)
        PyBuffer_Release(&pieces);
    return out;
}

/* ---- the walk and the replay in one pass ----------------------------------------------- */

/* Entries w->index..w->stop-1 indexed and written as the Python path does it: each
 * header read, then its payload queued (a queue that fills writes what it holds), so
 * the log is read once, in order, and a bad header stops the replay after the writes
 * the Python path makes before it, no more. Stops after indexing a discard, which
 * Python applies: *discard_at is then its index. */
static void walk_and_apply(struct walk *w, struct applier *a, int discard, int64_t *discard_at,
                           uint64_t *entries)
{
    const uint64_t S = w->sectorsize;
    for (; w->index < w->stop; w->index++) {
        if (walk_one(w))
            return;
        const uint64_t *rec = w->records.v + w->records.len - R_FIELDS;
        if (rec[R_FLAGS] & F_DISCARD) {
            if (discard) {
                if (!flush(a))
                    *discard_at = (int64_t)w->index++;
                return;
            }
        } else if (rec[R_NR]) {
            if (enqueue(a, rec[R_HEADER] + S, rec[R_NR] * S, (u128)rec[R_SECTOR] * S, w->index))
                return;
        }
        (*entries)++;
    }
    flush(a);
}

PyDoc_STRVAR(walk_apply_doc,
             "walk_apply(log_fd, target_fd, size, sectorsize, nr_entries, index, offset, stop,\n"
             "           window, buffer, iov_max, gap, discard)\n"
             "-> (records, marks, index, offset, discard_at, entries, bytes_written, failure)\n\n"
             "walk() and apply() in one pass over entries index..stop-1: each header is\n"
             "indexed, then its payload written. With discard, stop after indexing the first\n"
             "discard (discard_at is its index, else -1), which the caller applies.");

static PyObject *py_walk_apply(PyObject *self, PyObject *args)
{
    struct walk w;
    struct applier a;
    Py_buffer buffer;
    int discard;
    memset(&w, 0, sizeof w);
    memset(&a, 0, sizeof a);
    if (!PyArg_ParseTuple(args, "iiKKKKKKKw*iKp", &w.fd, &a.target_fd, &w.size, &w.sectorsize,
                          &w.nr_entries, &w.index, &w.offset, &w.stop, &w.window, &buffer,
                          &a.iov_max, &a.gap, &discard))
        return NULL;
    a.log_fd = w.fd;
    a.buf = buffer.buf;
    a.cap = (uint64_t)buffer.len;
    PyObject *out = NULL, *records = NULL, *marks = NULL, *failure = NULL;
    if (a.cap < w.sectorsize || a.iov_max < 1) {
        PyErr_SetString(PyExc_ValueError, "bad buffer or iov_max");
        goto done;
    }
    if (walk_begin(&w))
        goto done;
    a.iov = malloc((size_t)a.iov_max * sizeof *a.iov);
    if (!a.iov) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t discard_at = -1;
    uint64_t entries = 0;
    Py_BEGIN_ALLOW_THREADS
    walk_and_apply(&w, &a, discard, &discard_at, &entries);
    Py_END_ALLOW_THREADS
    if (a.oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (walk_results(&w, &records, &marks))
        goto done;
    failure = failure_tuple(w.failure.code != E_OK ? &w.failure : &a.failure);
    if (failure)
        out = Py_BuildValue("(OOKKLKKO)", records, marks, (unsigned long long)w.index,
                            (unsigned long long)w.offset, (long long)discard_at,
                            (unsigned long long)entries, (unsigned long long)a.bytes_written,
                            failure);
done:
    Py_XDECREF(records);
    Py_XDECREF(marks);
    Py_XDECREF(failure);
    walk_end(&w);
    free(a.iov);
    free(a.queue);
    PyBuffer_Release(&buffer);
    return out;
}

/* ---- searching ------------------------------------------------------------------------- */

PyDoc_STRVAR(find_flags_doc,
             "find_flags(records, start, stop, mask) -> int\n\n"
             "The first entry in start..stop-1 with a flag in mask, or -1.");

static PyObject *py_find_flags(PyObject *self, PyObject *args)
{
    Py_buffer records;
    unsigned long long start, stop, mask;
    if (!PyArg_ParseTuple(args, "y*KKK", &records, &start, &stop, &mask))
        return NULL;
    const uint64_t *rec = records.buf;
    const uint64_t nrecords = (uint64_t)records.len / (R_FIELDS * sizeof(uint64_t));
    long long found = -1;
    if (stop > nrecords)
        stop = nrecords;
    for (uint64_t i = start; i < stop; i++) {
        if (rec[R_FIELDS * i + R_FLAGS] & mask) {
            found = (long long)i;
            break;
        }
    }
    PyBuffer_Release(&records);
    return PyLong_FromLongLong(found);
}

static PyMethodDef methods[] = {
    {"walk", py_walk, METH_VARARGS, walk_doc},
    {"apply", py_apply, METH_VARARGS, apply_doc},
    {"walk_apply", py_walk_apply, METH_VARARGS, walk_apply_doc},
    {"plan", lognative_plan, METH_VARARGS, lognative_plan_doc},
    {"find_flags", py_find_flags, METH_VARARGS, find_flags_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_lognative",
    .m_doc = "The dm-log-writes header walk and replay loop in C (see devicemapper/native.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__lognative(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) ||
              PyModule_AddIntConstant(m, "FIELDS", R_FIELDS))) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
