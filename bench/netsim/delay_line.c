/*
 * delay_line: Ferry's one-way propagation delay for the emulated cross-region link.
 *
 * The kernel here has no sch_netem, so the delay is applied in user space: an iptables rule in the
 * router namespace sends every forwarded packet to an NFQUEUE, this program notes when it arrived
 * and gives the kernel its ACCEPT verdict DELAY later. Only metadata crosses to user space (no
 * payload copy) and GSO super-packets stay whole, so the cost is per 64 KiB, not per 1500 bytes.
 *
 * Release order is FIFO: a verdict "accept everything up to id N" (nfq_set_verdict_batch) frees a
 * whole run of due packets in one syscall. To keep FIFO true when the delay is lowered in place, a
 * packet's release time is never earlier than its predecessor's.
 *
 *   delay_line QUEUE DELAY_US CONTROL_FILE [TICK_US]
 *
 * CPU: a wake-up per packet would cost more than the packet (a 400 Mbit/s flow of small GSO
 * packets is ~40k arrivals and releases a second). After each wake-up the line sleeps TICK_US
 * (default 200) so arrivals and releases accumulate and are handled by one pass. A packet is then
 * timestamped up to TICK_US late and released up to TICK_US late while the line is busy (never when
 * idle: the first arrival wakes it at once and the release timer is exact). The held time is
 * shortened by TICK_US / 2, so the mean one-way delay is within TICK_US / 2 of DELAY_US whether the
 * link is idle or saturated: well under 1% of a cross-region RTT.
 *
 * SIGHUP re-reads DELAY_US (microseconds, one integer) from CONTROL_FILE: re-shaping without a
 * restart and without a dark moment. SIGUSR1 prints counters on stderr. SIGTERM/SIGINT exit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define SLOTS (1u << 19) /* held packets; a 2 Gbit/s x 100 ms pipe is ~4k GSO packets */

struct slot {
	uint32_t id;
	uint64_t release_ns;
};

static struct slot fifo[SLOTS];
static uint64_t first, next; /* fifo[first % SLOTS] .. fifo[(next - 1) % SLOTS] are held */
static uint64_t delay_ns, last_release_ns, tick_ns = 200000;
static uint64_t seen, dropped, peak;
static const char *control_path;
static volatile sig_atomic_t quit, reload, report;

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int read_delay(void)
{
	FILE *f = fopen(control_path, "r");
	long long us = -1;
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &us) != 1 || us < 0)
		us = -1;
	fclose(f);
	if (us < 0)
		return -1;
	delay_ns = (uint64_t)us * 1000ull;
	fprintf(stderr, "delay_line: one-way delay %lld us\n", us);
	return 0;
}

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *m, struct nfq_data *d, void *u)
{
	(void)m;
	(void)u;
	struct nfqnl_msg_packet_hdr *h = nfq_get_msg_packet_hdr(d);
	if (!h)
		return 0;
	uint32_t id = ntohl(h->packet_id);
	seen++;
	if (next - first == SLOTS) { /* full: drop, as a router with a full buffer would */
		dropped++;
		nfq_set_verdict(q, id, NF_DROP, 0, NULL);
		return 0;
	}
	uint64_t at = mono_ns() + (delay_ns > tick_ns / 2 ? delay_ns - tick_ns / 2 : 0);
	if (at < last_release_ns)
		at = last_release_ns;
	last_release_ns = at;
	fifo[next % SLOTS] = (struct slot){id, at};
	next++;
	if (next - first > peak)
		peak = next - first;
	return 0;
}

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		reload = 1;
	else if (sig == SIGUSR1)
		report = 1;
	else
		quit = 1;
}

/* Accept every packet whose time has come, with one batch verdict; how many there were. */
static uint64_t release_due(struct nfq_q_handle *q)
{
	uint64_t now = mono_ns();
	uint64_t n = first;
	while (n < next && fifo[n % SLOTS].release_ns <= now)
		n++;
	if (n == first)
		return 0;
	if (nfq_set_verdict_batch(q, fifo[(n - 1) % SLOTS].id, NF_ACCEPT) < 0)
		perror("delay_line: verdict");
	uint64_t released = n - first;
	first = n;
	return released;
}

static void drain_socket(struct nfq_handle *h, int fd)
{
	static char buf[256 * 1024];
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		if (n > 0)
			nfq_handle_packet(h, buf, (int)n);
		else if (n < 0 && errno == ENOBUFS)
			continue; /* the kernel dropped queued messages; keep reading */
		else
			return;
	}
}

static struct nfq_q_handle *open_queue(struct nfq_handle *h, int num)
{
	struct nfq_q_handle *q = nfq_create_queue(h, (uint16_t)num, on_packet, NULL);
	if (!q)
		return NULL;
	if (nfq_set_mode(q, NFQNL_COPY_META, 0) < 0)
		perror("delay_line: copy-meta mode");
	if (nfq_set_queue_maxlen(q, SLOTS) < 0)
		perror("delay_line: queue length");
	if (nfq_set_queue_flags(q, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0)
		perror("delay_line: GSO flag");
	return q;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s QUEUE DELAY_US CONTROL_FILE [TICK_US]\n", argv[0]);
		return 2;
	}
	int num = atoi(argv[1]);
	delay_ns = (uint64_t)strtoull(argv[2], NULL, 10) * 1000ull;
	control_path = argv[3];
	if (argc == 5)
		tick_ns = (uint64_t)strtoull(argv[4], NULL, 10) * 1000ull;
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* wake within 1 us of a release time */
	/* A late wake-up is added delay: on a busy machine, run before ordinary work (a nice value,
	 * not a real-time class, so a bug here can never starve the machine). */
	if (setpriority(PRIO_PROCESS, 0, -10) < 0)
		perror("delay_line: setpriority");

	struct nfq_handle *h = nfq_open();
	if (!h) {
		perror("delay_line: nfq_open");
		return 1;
	}
	struct nfq_q_handle *q = open_queue(h, num);
	if (!q) {
		perror("delay_line: queue busy or NFQUEUE missing");
		return 1;
	}
	int fd = nfq_fd(h);
	nfnl_rcvbufsiz(nfq_nfnlh(h), 64u << 20);
	int on = 1;
	setsockopt(fd, 270 /* SOL_NETLINK */, 5 /* NETLINK_NO_ENOBUFS */, &on, sizeof on);

	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	fprintf(stderr, "delay_line: queue %d, one-way delay %llu us, tick %llu us, pid %d\n", num,
		(unsigned long long)(delay_ns / 1000), (unsigned long long)(tick_ns / 1000), getpid());

	while (!quit) {
		if (reload) {
			reload = 0;
			if (read_delay() < 0)
				fprintf(stderr, "delay_line: cannot read %s, delay unchanged\n", control_path);
		}
		if (report) {
			report = 0;
			fprintf(stderr, "delay_line: packets=%llu dropped=%llu held=%llu peak=%llu delay_us=%llu\n",
				(unsigned long long)seen, (unsigned long long)dropped,
				(unsigned long long)(next - first), (unsigned long long)peak,
				(unsigned long long)(delay_ns / 1000));
		}
		struct timespec wait = {1, 0};
		if (first < next) {
			uint64_t now = mono_ns(), at = fifo[first % SLOTS].release_ns;
			uint64_t left = at > now ? at - now : 0;
			wait.tv_sec = (time_t)(left / 1000000000ull);
			wait.tv_nsec = (long)(left % 1000000000ull);
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = ppoll(&p, 1, &wait, NULL);
		if (r < 0 && errno != EINTR) {
			perror("delay_line: ppoll");
			break;
		}
		if (r > 0)
			drain_socket(h, fd);
		uint64_t released = release_due(q);
		if (tick_ns && (r > 0 || released)) { /* busy: let work accumulate for one tick */
			struct timespec nap = {(time_t)(tick_ns / 1000000000ull), (long)(tick_ns % 1000000000ull)};
			nanosleep(&nap, NULL);
		}
	}
	nfq_destroy_queue(q);
	nfq_close(h);
	return 0;
}
