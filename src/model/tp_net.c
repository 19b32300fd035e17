/* model/tp_net.c: handing the NCCL unique id of a tensor-parallel group to the
 * processes of the other hosts (--tp-master ADDR:PORT). The process holding rank 0
 * listens there and sends the id's TP_ID_BYTES to each process that connects and
 * says how many ranks it runs, until the group's ranks are all accounted for; the
 * others connect (retrying for a minute while rank 0 starts) and read it. Nothing
 * else travels over this socket: the collectives run over NCCL's own transports. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"

int tp_net_share_id(const char *master, int is_root, int world, int local, unsigned char *id);

static int full_io(int fd, void *p, size_t n, int out) {
    char *b = p;
    while (n > 0) {
        ssize_t k = out ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int tp_net_share_id(const char *master, int is_root, int world, int local, unsigned char *id) {
    char host[256];
    const char *colon = master ? strrchr(master, ':') : NULL;
    if (!colon || colon == master || (size_t)(colon - master) >= sizeof host || !colon[1])
        return err_set("--tp-master \"%s\": want ADDR:PORT", master ? master : "");
    memcpy(host, master, (size_t)(colon - master));
    host[colon - master] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = is_root ? AI_PASSIVE : 0}, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc != 0) return err_set("--tp-master %s: %s", master, gai_strerror(rc));
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) {
        freeaddrinfo(ai);
        return err_set("--tp-master %s: socket: %s", master, strerror(errno));
    }
    if (is_root) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            err_set("--tp-master %s: cannot listen: %s", master, strerror(errno));
            freeaddrinfo(ai);
            close(fd);
            return -1;
        }
        freeaddrinfo(ai);
        for (int have = local; have < world;) {
            int c = accept(fd, NULL, NULL);
            int32_t n = 0;
            if (c < 0 || full_io(c, &n, sizeof n, 0) != 0 || n < 1 || have + n > world || full_io(c, id, TP_ID_BYTES, 1) != 0) {
                if (c >= 0) close(c);
                close(fd);
                return err_set("--tp-master %s: a host sent a bad rank count or went away", master);
            }
            have += n;
            close(c);
        }
        close(fd);
        return 0;
    }
    /* the other hosts: rank 0 may not listen yet */
    int ok = -1;
    for (int tries = 0; tries < 120 && ok != 0; tries++) {
        ok = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (ok != 0) {
            close(fd);
            struct timespec half = {0, 500000000L};
            nanosleep(&half, NULL);
            if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0) break;
        }
    }
    freeaddrinfo(ai);
    if (ok != 0) {
        if (fd >= 0) close(fd);
        return err_set("--tp-master %s: rank 0 did not answer within a minute", master);
    }
    int32_t n = local;
    rc = full_io(fd, &n, sizeof n, 1) || full_io(fd, id, TP_ID_BYTES, 0) ? -1 : 0;
    close(fd);
    return rc ? err_set("--tp-master %s: the connection closed before the group id came", master) : 0;
}
