/*
 * loadgen: a small HTTP/1.1 load generator for loopback benchmarks of `denki serve` (bench/serve_load.py drives
 * it). One thread, epoll, keep-alive connections; compiled, so the client costs little CPU next to the server.
 *
 *   cc -O2 -o loadgen bench/loadgen.c
 *   loadgen --port 8080 --requests reqs.txt --duration 60 --rate 800 --connections 512 --out recs.bin
 *
 * Why not wrk: wrk reports one latency distribution for all answers; here the question is the latency of the
 * *admitted* requests (200) apart from the time to reject (503), so every request is recorded with its status.
 *
 * --rate R > 0  open loop: request k is due at k / R seconds (a constant rate, whatever the server does). It is
 *               sent on an idle connection, or on a new one (up to --connections); when none is free it waits in
 *               a client backlog, and that wait is recorded too (latency from the due time is not hidden).
 * --rate 0      closed loop: --connections connections, each sends its next request as soon as the previous
 *               answer arrived (the saturation throughput: the server's capacity).
 *
 * --requests FILE: records "<class> <length>\n" followed by <length> bytes (one complete raw HTTP/1.1 request)
 * and "\n"; sent in file order, cycling. Only 127.0.0.0/8 is accepted as --host: loopback by design.
 *
 * --out FILE: one binary record per request (little-endian, 32 bytes; see struct rec): due time and send time
 * (seconds since the start), latency from sending to the complete answer and backlog wait (ms), the HTTP status
 * (-1 connection error after the request was sent and before any answer byte, -2 timeout, -3 never sent: still
 * in the backlog when the run ended, -4 the connection closed in the middle of an answer, -5 the connection was
 * refused or failed while connecting: the request never reached the server) and the class.
 * stdout: one JSON line with the totals and the generator's own CPU time.
 *
 * Bounded in time: issuing stops at --duration; answers still outstanding get --timeout-ms more, then count
 * as timeouts; an alarm ends the process if anything hangs beyond that.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_RESPONSE (8u << 20) /* a larger answer is an error, not a reason to grow without bound */

struct rec {            /* written as is to --out */
    double t_due;       /* s since start: when the request was due (open loop) or issued (closed loop) */
    double t_send;      /* s since start: when its first byte was written (-1: never sent) */
    float latency_ms;   /* send → complete answer */
    float wait_ms;      /* due → send (client backlog, connection set-up) */
    int32_t status;     /* HTTP status, or -1 connection error, -2 timeout, -3 never sent, -4 answer cut, -5 no connection */
    int32_t cls;        /* request class from the requests file */
};

enum { C_CLOSED, C_CONNECTING, C_WRITING, C_READING, C_IDLE };

struct conn {
    int fd, state, served, retried;
    long rec;              /* index into recs of the request in flight, -1 if none */
    size_t req, off;       /* request (index into reqs) and bytes written */
    char *buf;
    size_t len, cap;
    int header_done, chunked, until_close, close_after, status;
    long content_length;
    size_t body_start;
};

struct req { int cls; char *data; size_t len; };

static struct req *reqs;
static size_t nreqs;
static struct rec *recs;
static size_t *rec_req; /* the request (index into reqs) each record stands for */
static size_t nrecs, caprecs;
static struct conn *conns;
static int nconns, open_conns, max_open, opened_total;
static int *idle, nidle;
static long *backlog;
static size_t bl_head, bl_tail, bl_cap;
static struct timespec t_start;
static struct sockaddr_in addr;
static int ep;
static size_t next_req; /* the next request of the file to give a record */
static long timeout_ms = 30000;
static long count_status[1000], conn_errors, timeouts, not_sent, retries, cut_answers, connect_failures;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t_start.tv_sec) + (double)(t.tv_nsec - t_start.tv_nsec) / 1e9;
}

static void die(const char *msg) {
    fprintf(stderr, "loadgen: %s\n", msg);
    exit(2);
}

static void load_requests(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open --requests file");
    size_t cap = 0;
    int cls;
    size_t len;
    while (fscanf(f, "%d %zu", &cls, &len) == 2) {
        if (fgetc(f) != '\n') die("requests file: expected a newline after '<class> <length>'");
        char *data = malloc(len);
        if (!data || fread(data, 1, len, f) != len) die("requests file: truncated request");
        if (fgetc(f) != '\n') die("requests file: expected a newline after a request");
        if (nreqs == cap) {
            cap = cap ? cap * 2 : 256;
            reqs = realloc(reqs, cap * sizeof *reqs);
            if (!reqs) die("out of memory");
        }
        reqs[nreqs++] = (struct req){cls, data, len};
    }
    fclose(f);
    if (!nreqs) die("requests file holds no request");
}

static long new_rec(double t_due) {
    if (nrecs == caprecs) {
        caprecs = caprecs ? caprecs * 2 : 65536;
        recs = realloc(recs, caprecs * sizeof *recs);
        rec_req = realloc(rec_req, caprecs * sizeof *rec_req);
        if (!recs || !rec_req) die("out of memory");
    }
    size_t q = next_req++ % nreqs; /* requests go out in file order, cycling */
    rec_req[nrecs] = q;
    recs[nrecs] = (struct rec){t_due, -1.0, 0.0f, 0.0f, -3, reqs[q].cls};
    return (long)nrecs++;
}

static void backlog_push(long rec) {
    if (bl_tail - bl_head == bl_cap) { /* overflow: the oldest stays; this one is never sent */
        not_sent++;
        return;
    }
    backlog[bl_tail++ % bl_cap] = rec;
}

static void ep_set(struct conn *c, uint32_t events, int op) {
    struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)(c - conns)};
    if (epoll_ctl(ep, op, c->fd, &ev) < 0 && op != EPOLL_CTL_DEL) die("epoll_ctl failed");
}

/* drop connection i from the idle stack (it is being closed while idle) */
static void idle_remove(int i) {
    for (int j = nidle - 1; j >= 0; j--)
        if (idle[j] == i) {
            memmove(&idle[j], &idle[j + 1], (size_t)(nidle - j - 1) * sizeof *idle);
            nidle--;
            return;
        }
}

static void conn_close(struct conn *c) {
    if (c->state == C_IDLE) idle_remove((int)(c - conns));
    if (c->fd >= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        open_conns--;
    }
    c->fd = -1;
    c->state = C_CLOSED;
    c->len = 0;
    c->served = 0;
}

static void reset_parse(struct conn *c) {
    c->len = 0;
    c->header_done = c->chunked = c->until_close = c->close_after = 0;
    c->status = 0;
    c->content_length = -1;
    c->body_start = 0;
}

static void finish(struct conn *c, int status) {
    double t = now_s();
    struct rec *r = &recs[c->rec];
    r->status = status;
    r->latency_ms = (float)((t - r->t_send) * 1e3);
    if (status >= 0 && status < 1000) count_status[status]++;
    else if (status == -1) conn_errors++;
    else if (status == -2) timeouts++;
    else if (status == -4) cut_answers++;
    else if (status == -5) connect_failures++;
    c->rec = -1;
}

static int conn_open(struct conn *c) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    if (rc < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->state = C_CONNECTING;
    c->served = 0;
    open_conns++;
    opened_total++;
    if (open_conns > max_open) max_open = open_conns;
    ep_set(c, EPOLLOUT, EPOLL_CTL_ADD);
    return 0;
}

static void start_write(struct conn *c) {
    c->state = C_WRITING;
    c->off = 0;
    reset_parse(c);
    ep_set(c, EPOLLOUT, EPOLL_CTL_MOD);
}

/* hand request record `rec` to connection c (open or idle) */
static void assign(struct conn *c, long rec) {
    c->rec = rec;
    c->req = rec_req[rec];
    c->retried = 0;
    recs[rec].t_send = now_s();
    recs[rec].wait_ms = (float)((recs[rec].t_send - recs[rec].t_due) * 1e3);
    if (c->state == C_IDLE) start_write(c);
    /* C_CONNECTING: the write starts once the connection is up */
}

/* a connection that can take a request now: an idle one (most recently used first), else a new one */
static struct conn *free_conn(void) {
    while (nidle > 0) {
        struct conn *c = &conns[idle[--nidle]];
        if (c->state == C_IDLE && c->fd >= 0) return c;
    }
    if (open_conns >= nconns) return NULL;
    for (int i = 0; i < nconns; i++) {
        if (conns[i].state == C_CLOSED) {
            if (conn_open(&conns[i]) < 0) return NULL;
            return &conns[i];
        }
    }
    return NULL;
}

/* the request failed on a reused keep-alive connection before any answer byte (the server may have closed it
 * while idle): retry it once on a fresh connection, else count a connection error */
static void fail(struct conn *c) {
    long rec = c->rec;
    size_t req = c->req;
    int reused = c->served > 0, got_bytes = c->len > 0, retried = c->retried;
    int connecting = c->state == C_CONNECTING;
    conn_close(c);
    if (rec < 0) return;
    if (reused && !got_bytes && !retried && conn_open(c) == 0) {
        retries++;
        c->rec = rec;
        c->req = req;
        c->retried = 1;
        return;
    }
    c->rec = rec;
    finish(c, got_bytes ? -4 : connecting ? -5 : -1);
}

static const char *find(const char *hay, size_t n, const char *needle) {
    return memmem(hay, n, needle, strlen(needle));
}

static void parse_headers(struct conn *c, size_t header_len) {
    char *p = c->buf, *end = c->buf + header_len;
    if (header_len < 12 || strncmp(p, "HTTP/1.", 7) != 0) {
        c->status = -1;
        return;
    }
    c->status = atoi(p + 9);
    char *line = memchr(p, '\n', (size_t)(end - p));
    while (line && line + 1 < end) {
        line++;
        char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) break;
        size_t n = (size_t)(eol - line);
        if (n >= 15 && strncasecmp(line, "content-length:", 15) == 0) c->content_length = atol(line + 15);
        else if (n >= 18 && strncasecmp(line, "transfer-encoding:", 18) == 0 && find(line, n, "chunked"))
            c->chunked = 1;
        else if (n >= 11 && strncasecmp(line, "connection:", 11) == 0 && find(line, n, "close"))
            c->close_after = 1;
        line = eol;
    }
    if (c->content_length < 0 && !c->chunked) c->until_close = 1;
}

/* 1: the answer in c->buf is complete; 0: more bytes needed */
static int chunked_complete(struct conn *c) {
    size_t p = c->body_start;
    for (;;) {
        const char *eol = find(c->buf + p, c->len - p, "\r\n");
        if (!eol) return 0;
        long size = strtol(c->buf + p, NULL, 16);
        p = (size_t)(eol - c->buf) + 2;
        if (size == 0) { /* last chunk: an empty line ends it (after optional trailers) */
            if (c->len - p >= 2 && c->buf[p] == '\r' && c->buf[p + 1] == '\n') return 1;
            return find(c->buf + p, c->len - p, "\r\n\r\n") != NULL;
        }
        if (c->len < p + (size_t)size + 2) return 0;
        p += (size_t)size + 2;
    }
}

static void complete(struct conn *c) {
    int close_it = c->close_after || c->until_close;
    finish(c, c->status);
    c->served++;
    if (close_it) {
        conn_close(c);
        return;
    }
    c->state = C_IDLE;
    reset_parse(c);
    ep_set(c, EPOLLIN, EPOLL_CTL_MOD); /* an idle connection is watched for the server closing it */
    idle[nidle++] = (int)(c - conns);
}

static void on_readable(struct conn *c) {
    int eof = 0; /* the server closed (or reset) the connection: parse what arrived first, then decide */
    for (;;) {
        if (c->cap - c->len < 65536) {
            size_t cap = c->cap ? c->cap * 2 : 131072;
            if (cap > MAX_RESPONSE + 65536) {
                fail(c);
                return;
            }
            c->buf = realloc(c->buf, cap);
            if (!c->buf) die("out of memory");
            c->cap = cap;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n > 0) {
            c->len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno == EINTR) continue;
        eof = 1;
        break;
    }
    if (c->state != C_READING) { /* the server closed an idle keep-alive connection, or sent bytes unasked */
        if (c->state == C_IDLE && (eof || c->len)) conn_close(c);
        return;
    }
    if (!c->header_done) {
        const char *h = find(c->buf, c->len, "\r\n\r\n");
        if (!h) {
            if (eof) fail(c);
            return;
        }
        size_t header_len = (size_t)(h - c->buf) + 4;
        parse_headers(c, header_len);
        if (c->status < 0) {
            fail(c);
            return;
        }
        c->header_done = 1;
        c->body_start = header_len;
    }
    int done = (c->content_length >= 0 && c->len >= c->body_start + (size_t)c->content_length) ||
               (c->chunked && chunked_complete(c)) || (eof && c->until_close);
    if (done) {
        if (eof) c->close_after = 1; /* a complete answer followed by the close: the connection is gone */
        complete(c);
    } else if (eof) {
        fail(c); /* closed in the middle of an answer: cut */
    }
}

static void on_writable(struct conn *c) {
    if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            fail(c);
            return;
        }
        if (c->rec < 0) { /* opened for nobody (cannot happen: connections open on demand) */
            c->state = C_IDLE;
            ep_set(c, EPOLLIN, EPOLL_CTL_MOD);
            idle[nidle++] = (int)(c - conns);
            return;
        }
        start_write(c);
    }
    struct req *r = &reqs[c->req];
    while (c->off < r->len) {
        ssize_t n = send(c->fd, r->data + c->off, r->len - c->off, MSG_NOSIGNAL);
        if (n > 0) {
            c->off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        fail(c);
        return;
    }
    c->state = C_READING;
    ep_set(c, EPOLLIN, EPOLL_CTL_MOD);
}

static void check_timeouts(double t) {
    for (int i = 0; i < nconns; i++) {
        struct conn *c = &conns[i];
        if (c->rec >= 0 && c->state != C_CLOSED && (t - recs[c->rec].t_send) * 1e3 > (double)timeout_ms) {
            finish(c, -2);
            conn_close(c);
        }
    }
}

static void usage(void) {
    fprintf(stderr, "usage: loadgen --port P --requests FILE --duration S [--rate R (0: closed loop)] "
                    "[--connections C] [--timeout-ms T] [--out FILE] [--host 127.0.0.1]\n");
    exit(2);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "loadgen: hard time limit reached\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *reqfile = NULL, *out = NULL;
    int port = 0;
    double duration = 0, rate = 0;
    nconns = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--requests")) reqfile = v;
        else if (!strcmp(a, "--duration")) duration = atof(v);
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--connections")) nconns = atoi(v);
        else if (!strcmp(a, "--timeout-ms")) timeout_ms = atol(v);
        else if (!strcmp(a, "--out")) out = v;
        else usage();
        i++;
    }
    if (!reqfile || port <= 0 || port > 65535 || duration <= 0 || duration > 86400 || rate < 0 || nconns < 1 ||
        nconns > 20000 || timeout_ms < 1)
        usage();
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1 || (ntohl(addr.sin_addr.s_addr) >> 24) != 127)
        die("--host must be an IPv4 loopback address (127.0.0.0/8): this tool loads local servers only");
    load_requests(reqfile);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)nconns + 64) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)nconns + 64 ? rl.rlim_max : (rlim_t)nconns + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, on_alarm);
    alarm((unsigned)(duration + (double)timeout_ms / 1e3 + 30));

    conns = calloc((size_t)nconns, sizeof *conns);
    idle = calloc((size_t)nconns * 2 + 16, sizeof *idle);
    bl_cap = 1u << 20;
    backlog = calloc(bl_cap, sizeof *backlog);
    if (!conns || !idle || !backlog) die("out of memory");
    for (int i = 0; i < nconns; i++) {
        conns[i].fd = -1;
        conns[i].rec = -1;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1 failed");

    struct epoll_event evs[512];
    clock_gettime(CLOCK_MONOTONIC, &t_start);
    long k = 0;                         /* open loop: requests made due so far */
    double last_timeout_check = 0, drain_until = duration + (double)timeout_ms / 1e3;
    int stopping = 0;
    for (;;) {
        double t = now_s();
        if (!stopping && t >= duration) { /* issuing ends: what still waits in the backlog is never sent */
            stopping = 1;
            while (bl_head < bl_tail) {
                recs[backlog[bl_head++ % bl_cap]].status = -3;
                not_sent++;
            }
        }
        if (!stopping && rate > 0)
            while ((double)k / rate <= t) backlog_push(new_rec((double)k++ / rate));
        /* send what is due: oldest first */
        while (bl_head < bl_tail) {
            struct conn *c = free_conn();
            if (!c) break;
            assign(c, backlog[bl_head++ % bl_cap]);
        }
        if (!stopping && rate == 0) { /* closed loop: every free connection gets its next request now */
            struct conn *c;
            while ((c = free_conn()) != NULL) assign(c, new_rec(t));
        }
        if (t - last_timeout_check > 0.1) {
            check_timeouts(t);
            last_timeout_check = t;
        }
        if (stopping) {
            int inflight = 0;
            for (int i = 0; i < nconns; i++) inflight += conns[i].rec >= 0;
            if (!inflight || t > drain_until) break;
        }
        int wait_ms = 50;
        if (!stopping && rate > 0) {
            double due = (double)k / rate - now_s();
            wait_ms = due <= 0 ? 0 : (int)(due * 1e3) + 1;
            if (wait_ms > 50) wait_ms = 50;
        }
        int n = epoll_wait(ep, evs, 512, wait_ms);
        if (n < 0 && errno != EINTR) die("epoll_wait failed");
        for (int i = 0; i < n; i++) {
            struct conn *c = &conns[evs[i].data.u32];
            if (c->fd < 0) continue;
            if (c->state == C_CONNECTING || c->state == C_WRITING) {
                if (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_writable(c);
            } else if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                on_readable(c);
            }
        }
    }
    /* whatever is still out: timeouts; still in the backlog: never sent */
    for (int i = 0; i < nconns; i++)
        if (conns[i].rec >= 0) finish(&conns[i], -2);
    while (bl_head < bl_tail) {
        recs[backlog[bl_head++ % bl_cap]].status = -3;
        not_sent++;
    }
    double wall = now_s();
    if (out) {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(recs, sizeof *recs, nrecs, f) != nrecs || fclose(f) != 0) die("cannot write --out");
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"records\": %zu, \"wall_s\": %.3f, \"duration_s\": %.3f, \"rate\": %.3f, \"connections\": %d, "
           "\"connections_opened\": %d, \"max_open\": %d, \"conn_errors\": %ld, \"timeouts\": %ld, "
           "\"not_sent\": %ld, \"retries\": %ld, \"cut_answers\": %ld, \"connect_failures\": %ld, "
           "\"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, \"status\": {",
           nrecs, wall, duration, rate, nconns, opened_total, max_open, conn_errors, timeouts, not_sent, retries,
           cut_answers, connect_failures,
           (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
    int first = 1;
    for (int s = 0; s < 1000; s++)
        if (count_status[s]) {
            printf("%s\"%d\": %ld", first ? "" : ", ", s, count_status[s]);
            first = 0;
        }
    printf("}}\n");
    return 0;
}
