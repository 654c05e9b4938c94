// boost_mq.cpp: the benchmark driver of bench/drivers/tvmq_driver.c, for a
// Boost.Interprocess message_queue, so that `tvmq bench` can compare the two.
//
//   boost_mq create --queue Q --capacity C --size S   (removes a stale one first)
//   boost_mq remove --queue Q
//   boost_mq run --queue Q --op OP --threads N [--pop-threads M]
//                --records R --size S [--batch B]
//   boost_mq latency --queue Q --size S --records R --gap-us G --out FILE
//   boost_mq idle --queue Q --size S --seconds N
//
// latency and idle are the latency benchmark of latency.h (a producer
// process and a consumer process blocked in receive), on an existing queue.
//
// The queue is named "tvmq_bench_<Q>" (a file in /dev/shm) and holds up to C
// messages of up to S bytes.
//   OP  push     N threads each try_send R/N records (a full queue is an error)
//       pop      N threads each receive R/N records (blocking; see do_pop)
//       pushpop  N push threads (R/N each) and M pop threads (R/M each) at once
// --batch is accepted for a command line common with tvmq_driver, and unused.
//
// Records are S bytes (S >= 8); when S >= 304 they start with the seed
// benchmark's dbUser filled as push_bench.c fills it. The queue is opened
// (open_only, then its pages mapped in, as lAttchTable does) before the clock
// starts and shared by the threads (message_queue is thread-safe); the clock
// covers thread creation, the work and the joins.
//
// Success: "ok ms=<ms, 3 decimals> records=<pushed+popped>" on stdout for run,
// nothing for create and remove. Failure: a message on stderr, exit 1. Bad
// arguments: usage on stderr, exit 2.
//
// Build: g++ -O2 -std=c++17 -Wall -Werror -o boost_mq bench/drivers/boost_mq.cpp -lpthread -lrt

#include "seed_record.h"
#include "latency.h"

#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace bip = boost::interprocess;

namespace {

constexpr int kMaxThreads = 64;

enum class Op { push, pop, pushpop };

// The command line.
struct Config {
    std::string cmd;
    unsigned long queue = 0;
    Op op = Op::push;
    int threads = 0, pop_threads = 0;
    unsigned long long records = 0, capacity = 0;
    size_t size = 0;
    unsigned gap_us = 0, seconds = 0;  // latency, idle
    std::string out;                   // latency
} cfg;

// One thread's work: push or pop `count` records; `done` is how many it moved.
// Each on its own 128 bytes: `done` moves on every record, and threads that
// shared a cache line would slow each other down (false sharing).
struct alignas(128) Job {
    bool pusher;
    int index;                 // thread number, for messages
    unsigned long long count;  // records to move
    unsigned long long first;  // sequence number of its first pushed record
    unsigned long long done = 0;
};

pthread_barrier_t start_line;  // every thread starts work together
std::atomic<bool> stopping{false};  // set by the first failure: threads quit
std::atomic<int> running{0};        // worker threads still working
thread_local bool is_worker = false;

// SIGINT and SIGTERM stop the threads (rather than kill them in a receive,
// see do_pop); the run then fails with the counts it reached.
extern "C" void on_signal(int) { stopping = true; }

std::string queue_name() { return "tvmq_bench_" + std::to_string(cfg.queue); }

// Reports a failure and ends the process with status 1. The other threads are
// told to stop and given up to a second to leave their loops (a waiting pop
// looks every 100 ms), so that none is killed inside a call on the queue.
[[noreturn]] void fail(const char *fmt, ...)
{
    va_list ap;
    std::fputs("boost_mq: ", stderr);
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);

    stopping = true;
    if (is_worker)
        running--;
    for (int ms = 0; ms < 1000 && running > 0; ms++)
        usleep(1000);
    _exit(1);
}

// Describes a Boost exception: message, a hint for size errors, the codes.
std::string describe(const bip::interprocess_exception &e)
{
    std::string text = e.what();
    if (e.get_error_code() == bip::size_error)
        text += " (the record size does not match the queue's message size)";
    return text + " (boost error " + std::to_string(e.get_error_code()) + ", errno " +
           std::to_string(e.get_native_error()) + ")";
}

// Reports the failed call `call` of thread j.
[[noreturn]] void fail_call(const Job &j, const char *call, const bip::interprocess_exception &e)
{
    fail("thread %d: %s failed after %llu records: %s", j.index, call, j.done, describe(e).c_str());
}

double now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

bool keep_going(const Job &j)
{
    return j.done < j.count && !stopping.load(std::memory_order_relaxed);
}

void do_push(Job &j, bip::message_queue &mq, char *rec)
{
    seed_record_fill(rec, cfg.size);
    while (keep_going(j)) {
        seed_record_set_seq(rec, j.first + j.done);
        bool sent;
        try {
            sent = mq.try_send(rec, cfg.size, 0);
        } catch (const bip::interprocess_exception &e) {
            fail_call(j, "try_send", e);
        }
        if (!sent)
            fail("thread %d: try_send failed after %llu records: queue is full", j.index, j.done);
        j.done++;
    }
}

// Pops with a blocking receive that looks at `stopping` every 100 ms while
// the queue is empty: try_receive (the same code as receive when there is a
// record), then timed_receive. No thread may die waiting in receive: the
// queue's process-shared condition variable would keep the dead waiter, and
// the next send or receive on the queue, by any process, would hang.
void do_pop(Job &j, bip::message_queue &mq, char *rec)
{
    namespace pt = boost::posix_time;
    while (keep_going(j)) {
        bip::message_queue::size_type got = 0;
        unsigned int priority;
        try {
            while (!mq.try_receive(rec, cfg.size, got, priority)) {
                if (stopping)
                    return;
                pt::ptime deadline = pt::microsec_clock::universal_time() + pt::milliseconds(100);
                if (mq.timed_receive(rec, cfg.size, got, priority, deadline))
                    break;
            }
        } catch (const bip::interprocess_exception &e) {
            fail_call(j, "receive", e);
        }
        if (got != cfg.size)
            fail("thread %d: receive got a record of %zu bytes, expected %zu", j.index,
                 (size_t)got, cfg.size);
        j.done++;
    }
}

void worker(Job &j, bip::message_queue &mq)
{
    is_worker = true;
    try {
        std::unique_ptr<char[]> rec(new char[cfg.size]);
        pthread_barrier_wait(&start_line);
        if (j.pusher)
            do_push(j, mq, rec.get());
        else
            do_pop(j, mq, rec.get());
    } catch (const std::exception &e) {  // calls on mq report their own errors
        fail("thread %d: %s", j.index, e.what());
    }
    running--;
}

[[noreturn]] void usage(const char *msg)
{
    if (msg)
        std::fprintf(stderr, "boost_mq: %s\n", msg);
    std::fprintf(stderr,
                 "usage: boost_mq create --queue Q --capacity C --size S\n"
                 "       boost_mq remove --queue Q\n"
                 "       boost_mq run --queue Q --op push|pop|pushpop --threads N\n"
                 "                    [--pop-threads M] --records R --size S [--batch B]\n"
                 "       boost_mq latency --queue Q --size S --records R --gap-us G --out FILE\n"
                 "       boost_mq idle --queue Q --size S --seconds N\n"
                 "  queue name: tvmq_bench_<Q>; N, M: 1..%d (M defaults to N; pushpop only);\n"
                 "  S >= 8 bytes; --batch is ignored\n",
                 kMaxThreads);
    std::exit(2);
}

// Parses a whole decimal number in [min, max], or exits with the usage.
unsigned long long number(const char *opt, const char *s, unsigned long long min,
                          unsigned long long max)
{
    char *end;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
        std::fprintf(stderr, "boost_mq: bad value for %s: '%s' (%llu..%llu)\n", opt, s, min, max);
        usage(nullptr);
    }
    return v;
}

void parse_args(int argc, char *argv[])
{
    if (argc < 2)
        usage("a command is required");
    cfg.cmd = argv[1];
    if (cfg.cmd != "create" && cfg.cmd != "remove" && cfg.cmd != "run" && cfg.cmd != "latency" &&
        cfg.cmd != "idle")
        usage("unknown command");

    // Options each command takes, and which of them were given.
    std::string allowed = cfg.cmd == "create" ? " --queue --capacity --size "
                        : cfg.cmd == "remove" ? " --queue "
                        : cfg.cmd == "latency" ? " --queue --size --records --gap-us --out "
                        : cfg.cmd == "idle" ? " --queue --size --seconds "
                        : " --queue --op --threads --pop-threads --records --size --batch ";
    std::string given = " ";
    for (int i = 2; i < argc; i += 2) {
        std::string opt = argv[i];
        const char *val = argv[i + 1];
        if (allowed.find(" " + opt + " ") == std::string::npos) {
            std::fprintf(stderr, "boost_mq: unknown option '%s' for %s\n", opt.c_str(), cfg.cmd.c_str());
            usage(nullptr);
        }
        if (!val)
            usage("missing value after the last option");
        given += opt + " ";
        if (opt == "--queue")
            cfg.queue = number(argv[i], val, 0, UINT32_MAX);
        else if (opt == "--capacity")
            cfg.capacity = number(argv[i], val, 1, 1ULL << 40);
        else if (opt == "--size")
            cfg.size = number(argv[i], val, 8, 1ULL << 30);
        else if (opt == "--threads")
            cfg.threads = (int)number(argv[i], val, 1, kMaxThreads);
        else if (opt == "--pop-threads")
            cfg.pop_threads = (int)number(argv[i], val, 1, kMaxThreads);
        else if (opt == "--records")
            cfg.records = number(argv[i], val, 0, LONG_MAX);
        else if (opt == "--batch")
            number(argv[i], val, 1, 1ULL << 20);
        else if (opt == "--gap-us")
            cfg.gap_us = (unsigned)number(argv[i], val, 0, 10000000);
        else if (opt == "--seconds")
            cfg.seconds = (unsigned)number(argv[i], val, 1, 3600);
        else if (opt == "--out")
            cfg.out = val;
        else if (!std::strcmp(val, "push"))  // --op
            cfg.op = Op::push;
        else if (!std::strcmp(val, "pop"))
            cfg.op = Op::pop;
        else if (!std::strcmp(val, "pushpop"))
            cfg.op = Op::pushpop;
        else
            usage("unknown --op (boost_mq runs push, pop and pushpop)");
    }

    // Every allowed option but the optional ones is required.
    for (const char *opt : {"--queue", "--capacity", "--size", "--op", "--threads", "--records", "--gap-us", "--out",
                            "--seconds"})
        if (allowed.find(std::string(" ") + opt + " ") != std::string::npos &&
            given.find(std::string(" ") + opt + " ") == std::string::npos) {
            std::fprintf(stderr, "boost_mq: %s needs %s\n", cfg.cmd.c_str(), opt);
            usage(nullptr);
        }
    if (cfg.pop_threads == 0)
        cfg.pop_threads = cfg.threads;
}

// Creates the queue, then allocates all of its memory now, as tvmq does for a
// queue file: otherwise the first run would pay for allocating and zeroing
// every page (2.5 s for a 1.3 GB queue) and the next ones would not.
// MADV_POPULATE_WRITE faults every page in, writable, without changing it.
int create_queue()
{
    std::string name = queue_name();
    bip::message_queue::remove(name.c_str());
    try {
        bip::message_queue mq(bip::create_only, name.c_str(), cfg.capacity, cfg.size);
    } catch (const bip::interprocess_exception &e) {
        fail("message_queue(create_only, %s) failed: %s", name.c_str(), describe(e).c_str());
    }

    int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        fail("shm_open/fstat(/%s) failed: %s", name.c_str(), std::strerror(errno));
    void *mem = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        fail("mmap(/%s, %lld bytes) failed: %s", name.c_str(), (long long)st.st_size,
             std::strerror(errno));
    if (madvise(mem, st.st_size, MADV_POPULATE_WRITE) != 0 && errno != EINVAL)
        fail("madvise(/%s, MADV_POPULATE_WRITE) failed: %s", name.c_str(), std::strerror(errno));
    // EINVAL: a kernel before 5.14; the first run will pay for the pages.
    munmap(mem, st.st_size);
    close(fd);
    return 0;
}

// Maps in every page of this process's mapping of the queue, as tvmq's
// lAttchTable does for its queue, so that the timed work takes no page faults
// on either side (a 1.3 GB queue: 20,000 faults, 50 ms of a 300 ms push).
// message_queue does not expose its mapping: find it in /proc/self/maps.
void populate_mapping()
{
    std::string path = "/dev/shm/" + queue_name();
    FILE *maps = std::fopen("/proc/self/maps", "r");
    char line[4096];
    bool found = false;
    while (maps && std::fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char file[4096] = "";
        if (std::sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &lo, &hi, file) < 3 || path != file)
            continue;
        found = true;
        if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) != 0 && errno != EINVAL)
            fail("madvise(%s, MADV_POPULATE_WRITE) failed: %s", path.c_str(), std::strerror(errno));
    }
    if (maps)
        std::fclose(maps);
    if (!found)
        fail("cannot find the mapping of %s in /proc/self/maps", path.c_str());
}

int remove_queue()
{
    bip::message_queue::remove(queue_name().c_str());  // false when absent: fine
    return 0;
}

int run()
{
    // Push threads (or the only kind of thread), then pop threads for pushpop.
    int n = cfg.threads, m = cfg.op == Op::pushpop ? cfg.pop_threads : 0;
    std::vector<Job> jobs;
    unsigned long long want_push = 0, want_pop = 0, pushed = 0, popped = 0;
    for (int i = 0; i < n + m; i++) {
        Job j;
        j.index = i;
        j.pusher = i < n && cfg.op != Op::pop;
        j.count = cfg.records / (i < n ? n : m);
        j.first = i < n ? j.count * i : 0;
        (j.pusher ? want_push : want_pop) += j.count;
        jobs.push_back(j);
    }

    // Open before the clock starts, as the seed benchmarks attach first.
    std::unique_ptr<bip::message_queue> mq;
    try {
        mq.reset(new bip::message_queue(bip::open_only, queue_name().c_str()));
    } catch (const bip::interprocess_exception &e) {
        fail("message_queue(open_only, %s) failed: %s", queue_name().c_str(), describe(e).c_str());
    }
    populate_mapping();

    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    pthread_barrier_init(&start_line, nullptr, jobs.size());
    running = (int)jobs.size();
    std::vector<std::thread> threads;
    double t0 = now_ms();
    try {
        for (Job &j : jobs)
            threads.emplace_back(worker, std::ref(j), std::ref(*mq));
    } catch (const std::system_error &e) {
        fail("std::thread: %s", e.what());
    }
    for (std::thread &t : threads)
        t.join();
    double t1 = now_ms();

    for (const Job &j : jobs)
        (j.pusher ? pushed : popped) += j.done;
    if (pushed != want_push || popped != want_pop)
        fail("%spushed %llu of %llu, popped %llu of %llu records",
             stopping ? "stopped by a signal: " : "", pushed, want_push, popped, want_pop);

    std::printf("ok ms=%.3f records=%llu\n", t1 - t0, pushed + popped);
    return 0;
}

// The latency benchmark's transport: one message_queue per process.
void *latency_open(int)
{
    try {
        return new bip::message_queue(bip::open_only, queue_name().c_str());
    } catch (const bip::interprocess_exception &e) {
        std::fprintf(stderr, "boost_mq: message_queue(open_only): %s\n", describe(e).c_str());
        return nullptr;
    }
}

int latency_send(void *ctx, const char *rec, size_t size)
{
    return static_cast<bip::message_queue *>(ctx)->try_send(rec, size, 0) ? 0 : -1;
}

int latency_recv(void *ctx, char *rec, size_t size)
{
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    static_cast<bip::message_queue *>(ctx)->receive(rec, size, got, prio);
    return got == size ? 0 : -1;
}

const latency_ops boost_latency_ops = {latency_open, latency_send, latency_recv};

}  // namespace

int main(int argc, char *argv[])
{
    parse_args(argc, argv);
    if (cfg.cmd == "latency")
        return latency_run(&boost_latency_ops, cfg.size, cfg.records, cfg.gap_us, cfg.out.c_str());
    if (cfg.cmd == "idle")
        return latency_idle(&boost_latency_ops, cfg.size, cfg.seconds);
    if (cfg.cmd == "create")
        return create_queue();
    if (cfg.cmd == "remove")
        return remove_queue();
    return run();
}
