/*
 * The pieces of a range of log entries that no later entry of the range overwrites
 * (devicemapper.replay's ``latest``): a sweep over the target. The Python reference,
 * an independent algorithm, is devicemapper.apply.latest_pieces.
 */

#include "_lognative.h"

#include <stdlib.h>

struct op {
    u128 start, end; /* in sectors */
    uint64_t index;
    int discard;
};

struct event {
    u128 pos;
    uint32_t op;
    int end;
};

struct segment {
    uint32_t op;
    u128 start, end;
};

static int by_pos(const void *x, const void *y)
{
    const struct event *a = x, *b = y;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static int by_op_then_start(const void *x, const void *y)
{
    const struct segment *a = x, *b = y;
    if (a->op != b->op)
        return a->op < b->op ? -1 : 1;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* A max-heap of op numbers: the op on top is the latest one covering the sweep point. */
static void heap_push(uint32_t *h, size_t *n, uint32_t v)
{
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] < v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static void heap_pop(uint32_t *h, size_t *n)
{
    uint32_t v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] > h[c])
            c++;
        if (h[c] <= v)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = v;
}

/* Sweep the target from low to high sector: between two consecutive ends of extents,
 * the bytes belong to the latest entry covering them, and only that entry's piece is
 * kept. The pieces come out in log order. */
static int plan_pieces(const uint64_t *records, uint64_t start, uint64_t stop, int discard,
                       struct u64s *writes, struct u64s *discards, u128 *max_end)
{
    size_t nops = 0;
    int rc = -1;
    struct op *ops = malloc((stop - start + 1) * sizeof *ops);
    struct event *events = malloc(2 * (stop - start + 1) * sizeof *events);
    uint32_t *heap = malloc((stop - start + 1) * sizeof *heap);
    unsigned char *ended = calloc(stop - start + 1, 1);
    struct segment *segs = NULL;
    size_t nsegs = 0;
    if (!ops || !events || !heap || !ended)
        goto out;
    *max_end = 0;
    for (uint64_t i = start; i < stop; i++) {
        const uint64_t *rec = records + R_FIELDS * i;
        const int is_discard = (rec[R_FLAGS] & F_DISCARD) != 0;
        if (!rec[R_NR] || (is_discard && !discard))
            continue;
        struct op *op = &ops[nops];
        op->start = rec[R_SECTOR];
        op->end = (u128)rec[R_SECTOR] + rec[R_NR];
        op->index = i;
        op->discard = is_discard;
        if (!is_discard && op->end > *max_end)
            *max_end = op->end;
        events[2 * nops] = (struct event){op->start, (uint32_t)nops, 0};
        events[2 * nops + 1] = (struct event){op->end, (uint32_t)nops, 1};
        nops++;
    }
    qsort(events, 2 * nops, sizeof *events, by_pos);
    segs = malloc((2 * nops + 1) * sizeof *segs);
    if (!segs)
        goto out;
    size_t nheap = 0;
    u128 prev = 0;
    for (size_t e = 0; e < 2 * nops;) {
        const u128 pos = events[e].pos;
        while (nheap && ended[heap[0]])
            heap_pop(heap, &nheap);
        if (nheap && pos > prev) {
            const uint32_t top = heap[0];
            if (nsegs && segs[nsegs - 1].op == top && segs[nsegs - 1].end == prev)
                segs[nsegs - 1].end = pos;
            else
                segs[nsegs++] = (struct segment){top, prev, pos};
        }
        for (; e < 2 * nops && events[e].pos == pos; e++) {
            if (events[e].end)
                ended[events[e].op] = 1;
            else
                heap_push(heap, &nheap, events[e].op);
        }
        prev = pos;
    }
    qsort(segs, nsegs, sizeof *segs, by_op_then_start);
    for (size_t s = 0; s < nsegs; s++) {
        const struct op *op = &ops[segs[s].op];
        const uint64_t piece[3] = {op->index, (uint64_t)(segs[s].start - op->start),
                                   (uint64_t)(segs[s].end - segs[s].start)};
        if (u64s_push(op->discard ? discards : writes, piece, 3))
            goto out;
    }
    rc = 0;
out:
    free(ops);
    free(events);
    free(heap);
    free(ended);
    free(segs);
    return rc;
}

const char lognative_plan_doc[] =
    "plan(records, start, stop, discard) -> (writes, discards, max_write_end)\n\n"
    "The pieces of entries start..stop-1 that no later entry in the range\n"
    "overwrites (a discard overwrites too, when discards are applied): writes as\n"
    "bytes of (index, first sector, sectors) uint64 triples in log order, discards\n"
    "as a list of such tuples, and the end (in sectors) of the furthest write.";

PyObject *lognative_plan(PyObject *self, PyObject *args)
{
    Py_buffer records;
    unsigned long long start, stop;
    int discard;
    if (!PyArg_ParseTuple(args, "y*KKp", &records, &start, &stop, &discard))
        return NULL;
    const uint64_t nrecords = (uint64_t)records.len / (R_FIELDS * sizeof(uint64_t));
    if (start > stop || stop > nrecords || stop - start >= UINT32_MAX) {
        PyBuffer_Release(&records);
        PyErr_SetString(PyExc_ValueError, "bad range");
        return NULL;
    }
    struct u64s writes = {0}, discards = {0};
    u128 max_end = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = plan_pieces(records.buf, start, stop, discard, &writes, &discards, &max_end);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    PyObject *out = NULL, *w = NULL, *d = NULL, *end = NULL;
    if (rc) {
        PyErr_NoMemory();
        goto done;
    }
    w = PyBytes_FromStringAndSize((const char *)writes.v,
                                  (Py_ssize_t)(writes.len * sizeof(uint64_t)));
    d = PyList_New(0);
    end = long_from_u128(max_end);
    if (!w || !d || !end)
        goto done;
    for (size_t i = 0; i < discards.len; i += 3) {
        PyObject *t = Py_BuildValue("(KKK)", (unsigned long long)discards.v[i],
                                    (unsigned long long)discards.v[i + 1],
                                    (unsigned long long)discards.v[i + 2]);
        if (!t || PyList_Append(d, t)) {
            Py_XDECREF(t);
            goto done;
        }
        Py_DECREF(t);
    }
    out = Py_BuildValue("(OOO)", w, d, end);
done:
    Py_XDECREF(w);
    Py_XDECREF(d);
    Py_XDECREF(end);
    free(writes.v);
    free(discards.v);
    return out;
}

