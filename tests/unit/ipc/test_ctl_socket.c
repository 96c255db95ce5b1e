/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ctl.c: the socket, fd passing and its truncations, unexpected fds, credentials. */
#include "ipc/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "ctl_fixture.h"

/* ---- helpers ---- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void seqpacket_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static int make_memfd(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

/* sendmsg with any number of fds, without ipc_ctl_send()'s checks (a misbehaving peer). */
static void send_raw(int sock, const void *m, size_t len, const int *fds, size_t n)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 8)];
	struct iovec iov = { .iov_base = (void *)m, .iov_len = len };
	struct msghdr mh;
	struct cmsghdr *c;

	assert_true(n <= 8);
	memset(&mh, 0, sizeof(mh));
	memset(cbuf, 0, sizeof(cbuf));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (n) {
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	assert_int_equal(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

static void same_file(int a, int b)
{
	struct stat sa, sb;

	assert_int_equal(fstat(a, &sa), 0);
	assert_int_equal(fstat(b, &sb), 0);
	assert_int_equal(sa.st_ino, sb.st_ino);
	assert_int_equal(sa.st_dev, sb.st_dev);
}

/* ---- the socket ---- */

static void test_fd_passing(void **state)
{
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached a, out;
	struct ipc_ctl_msg m;
	int sv[2], memfds[2], got[IPC_CTL_MAX_FDS], before, flags;
	size_t len, nfds, i;
	int n;

	(void)state;
	before = count_fds();
	seqpacket_pair(sv);
	memfds[0] = make_memfd("ring-data", 1 << 16);
	memfds[1] = make_memfd("reader-ctl", 4096);
	fill_attached(&a, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 42, &a, &len), 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, memfds, 2), 0);

	memset(buf, 0, sizeof(buf));
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 2);
	for (i = 0; i < 2; i++) {
		same_file(got[i], memfds[i]);
		assert_int_not_equal(got[i], memfds[i]);
		flags = fcntl(got[i], F_GETFD);
		assert_true(flags >= 0 && (flags & FD_CLOEXEC));
	}
	m = parse_ok(buf, (size_t)n, IPC_CTL_ATTACHED, 42);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_tensors, 3);
	ipc_ctl_attached_fini(&out);

	/* send refuses fds on a type that carries none, and more than ATTACHED carries. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len),
			 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, memfds, 1), -EINVAL);
	assert_int_equal(ipc_ctl_send(sv[0], buf, IPC_CTL_HDR_SIZE - 1, NULL, 0), -EINVAL);
	assert_int_equal(ipc_ctl_send(sv[0], buf, IPC_CTL_MAX_MSG + 1, NULL, 0), -EMSGSIZE);

	/* A message without fds, then the peer closes: 0. */
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 0);
	close(sv[0]);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds), 0);
	/* Sending to a closed peer: -EPIPE, no SIGPIPE. */
	assert_int_equal(ipc_ctl_send(sv[1], buf, len, NULL, 0), -EPIPE);

	close(sv[1]);
	close(got[0]);
	close(got[1]);
	close(memfds[0]);
	close(memfds[1]);
	assert_int_equal(count_fds(), before);
}

static void test_ctrunc(void **state)
{
	int sv[2], fds[3], got[IPC_CTL_MAX_FDS], before, during, i;
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached a;
	size_t len, nfds = 99;
	int n;

	(void)state;
	before = count_fds();
	seqpacket_pair(sv);
	for (i = 0; i < 3; i++)
		fds[i] = make_memfd("x", 4096);
	fill_attached(&a, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &a, &len), 0);
	during = count_fds();

	/* Three fds, room for one: MSG_CTRUNC, an error, and whatever arrived is closed. */
	send_raw(sv[0], buf, len, fds, 3);
	got[0] = -1;
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 1, &nfds);
	assert_int_equal(n, -EBADMSG);
	assert_int_equal(nfds, 99);
	assert_int_equal(got[0], -1);
	assert_int_equal(count_fds(), during);

	/* Three fds, room for none at all. */
	send_raw(sv[0], buf, len, fds, 3);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), NULL, 0, NULL), -EBADMSG);
	assert_int_equal(count_fds(), during);

	/* Two fds, room for one: the control buffer's rounding may let both in without
	 * MSG_CTRUNC; then the one past max_fds is closed here. Either way nothing leaks. */
	send_raw(sv[0], buf, len, fds, 2);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 1, &nfds);
	if (n > 0) {
		assert_int_equal(nfds, 1);
		same_file(got[0], fds[0]);
		close(got[0]);
	} else {
		assert_int_equal(n, -EBADMSG);
	}
	assert_int_equal(count_fds(), during);

	/* Three fds on an ATTACHED (which carries two), with room for IPC_CTL_MAX_FDS: the
	 * third is closed here. */
	send_raw(sv[0], buf, len, fds, 3);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 2);
	same_file(got[0], fds[0]);
	same_file(got[1], fds[1]);
	close(got[0]);
	close(got[1]);
	assert_int_equal(count_fds(), during);

	for (i = 0; i < 3; i++)
		close(fds[i]);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(count_fds(), before);
}

static void test_mtrunc(void **state)
{
	static char big[1000];
	struct ipc_ctl_register r = { .spec = big, .spec_len = 1 };
	int sv[2], fds[2], got[IPC_CTL_MAX_FDS], during;
	char small[100];
	size_t len, nfds;
	int n;

	(void)state;
	seqpacket_pair(sv);
	fds[0] = make_memfd("a", 4096);
	fds[1] = make_memfd("b", 4096);
	during = count_fds();
	memset(big, 'x', sizeof(big));
	r.spec_len = sizeof(big);
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 1, &r, &len), 0);
	assert_true(len > sizeof(small));

	/* Larger than the buffer: -EMSGSIZE (the tail is gone: the caller drops the connection). */
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	assert_int_equal(ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds), -EMSGSIZE);
	/* ... with fds: they are closed. */
	send_raw(sv[0], buf, len, fds, 2);
	assert_int_equal(ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds), -EMSGSIZE);
	assert_int_equal(count_fds(), during);

	/* The datagram was consumed: the next one arrives whole. */
	r.spec_len = 10;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 2, &r, &len), 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	n = ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds);
	assert_int_equal(n, (int)len);
	parse_ok(small, (size_t)n, IPC_CTL_REGISTER, 2);

	close(fds[0]);
	close(fds[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_unexpected_fds(void **state)
{
	struct ipc_ctl_error e = { .code = -ENOENT };
	int sv[2], fds[2], got[IPC_CTL_MAX_FDS], during;
	uint8_t junk[64];
	size_t len, nfds;
	int n;

	(void)state;
	seqpacket_pair(sv);
	fds[0] = make_memfd("a", 4096);
	fds[1] = make_memfd("b", 4096);
	during = count_fds();

	/* An ERROR carries no fds: the two that came with it are closed. */
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 1, &e, &len), 0);
	send_raw(sv[0], buf, len, fds, 2);
	got[0] = got[1] = -1;
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 0);
	assert_int_equal(count_fds(), during);

	/* Not even a header (junk, a short datagram): any fds are closed. */
	memset(junk, 0xab, sizeof(junk));
	send_raw(sv[0], junk, sizeof(junk), fds, 2);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)sizeof(junk));
	assert_int_equal(nfds, 0);
	send_raw(sv[0], junk, 3, fds, 1);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, 3);
	assert_int_equal(nfds, 0);
	assert_int_equal(count_fds(), during);

	/* An ATTACHED of another protocol version: its fds are not taken either. */
	{
		struct ipc_ctl_tensor_info t[3];
		struct ipc_ctl_attached a;

		fill_attached(&a, t);
		assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &a, &len), 0);
		put16(buf + 4, 2);
		send_raw(sv[0], buf, len, fds, 2);
		n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
		assert_int_equal(n, (int)len);
		assert_int_equal(nfds, 0);
		assert_int_equal(count_fds(), during);
	}

	/* Bad arguments. */
	assert_int_equal(ipc_ctl_recv(sv[1], NULL, 10, got, 2, &nfds), -EINVAL);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), NULL, 2, &nfds), -EINVAL);
	/* Non-blocking with nothing there: -EAGAIN. */
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 2, &nfds), -EAGAIN);

	close(fds[0]);
	close(fds[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_peer_cred(void **state)
{
	uid_t uid;
	gid_t gid;
	pid_t pid;
	int sv[2];

	(void)state;
	seqpacket_pair(sv);
	assert_int_equal(ipc_ctl_peer_cred(sv[1], &uid, &gid, &pid), 0);
	assert_int_equal(uid, getuid());
	assert_int_equal(gid, getgid());
	assert_int_equal(pid, getpid());
	assert_int_equal(ipc_ctl_peer_cred(sv[0], NULL, NULL, &pid), 0);
	assert_int_equal(pid, getpid());
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(ipc_ctl_peer_cred(-1, &uid, &gid, &pid), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd_passing), cmocka_unit_test(test_ctrunc),
		cmocka_unit_test(test_mtrunc),	   cmocka_unit_test(test_unexpected_fds),
		cmocka_unit_test(test_peer_cred),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
