/* mp_progress.c — the one progress line of mechprobe's long loops (m:train's
 * training loop, SAE training): a redrawn bar on a terminal, one plain line
 * per call otherwise (declared in mp_common.h). */
#include "mp_common.h"

#include <stdio.h>

/* "m:ss" or "h:mm:ss"; "--:--" for an unknown or absurd time. */
static void fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void mp_progress_line(int tty, long step, long total, const char *metrics, double tps, double eta, double elapsed,
                      int done) {
    char e[32], el[32];
    fmt_time(e, sizeof e, eta);
    fmt_time(el, sizeof el, elapsed);
    if (tty) {
        char bar[31];
        int fill = total ? (int)(30.0 * step / total) : 30;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[30] = '\0';
        fprintf(stderr, "\r%*ld/%ld [%s] %s | %.3g tok/s | %s %s\033[K", (int)snprintf(NULL, 0, "%ld", total), step,
                total, bar, metrics, tps, done ? "took" : "ETA", done ? el : e);
        if (done) fputc('\n', stderr);
    } else {
        fprintf(stderr, "step %ld/%ld  %s  %.3g tok/s  %s %s\n", step, total, metrics, tps, done ? "took" : "ETA",
                done ? el : e);
    }
    fflush(stderr);
}
