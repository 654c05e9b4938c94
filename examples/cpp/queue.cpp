// queue.cpp: tvm.h from C++ -- a small RAII wrapper over one handle, and
// two std::threads passing 10,000 records through queue 43.
//
//   g++ -O2 -Wall -std=c++17 queue.cpp $(pkg-config --cflags --libs tvm) -o queue_cpp
#include "tvm.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

// One handle per thread (pCloneSATvm), freed when the object goes.
class TvmQueue {
  public:
    explicit TvmQueue(TABLE id) : p_(static_cast<SATvm *>(pCloneSATvm())), id_(id) {
        if (!p_) throw std::runtime_error("pCloneSATvm: out of memory");
    }
    ~TvmQueue() { vCloneFree(p_); }
    TvmQueue(const TvmQueue &) = delete;
    TvmQueue &operator=(const TvmQueue &) = delete;

    // False when the queue is full; throws on any other error.
    template <class T> bool try_push(T &record) {
        queuevoid(p_, record, sizeof(T), id_);
        if (lPush(p_) == RC_SUCC) return true;
        if (p_->m_lErrno == DATA_SPC_FULL) return false;
        check(RC_FAIL, "lPush");
        return false;
    }
    template <class T> void pop(T &record) {
        queuevoid(p_, record, sizeof(T), id_);
        check(lPop(p_, &record, QUE_NORMAL), "lPop");
    }

  private:
    void check(long rc, const char *what) {
        if (rc != RC_SUCC) throw std::runtime_error(std::string(what) + ": " + sGetTError(p_->m_lErrno));
    }
    SATvm *p_;
    TABLE id_;
};

struct Tick {
    long n;
    double value;
};

int main() {
    SATvm *g = static_cast<SATvm *>(pGetSATvm());
    lDropTable(g, 43);  // a leftover of an earlier run, if any
    if (lCircleQueue(g, 43, 256, sizeof(Tick), const_cast<char *>("ticks"), nullptr) != RC_SUCC) {
        std::fprintf(stderr, "lCircleQueue: %s\n", sGetTError(g->m_lErrno));
        return 1;
    }
    constexpr long kCount = 10000;
    std::thread producer([] {
        TvmQueue q(43);
        for (long i = 0; i < kCount; i++) {
            Tick t{i, i * 0.5};
            while (!q.try_push(t)) std::this_thread::yield();  // full: the consumer catches up
        }
    });
    long bad = 0;
    double sum = 0;
    {
        TvmQueue q(43);
        for (long i = 0; i < kCount; i++) {
            Tick t{};
            q.pop(t);
            bad += t.n != i;
            sum += t.value;
        }
    }
    producer.join();
    lDropTable(g, 43);
    std::printf("C++: %ld ticks through queue 43 in order (%ld out of order), sum %.1f\n", kCount, bad, sum);
    return bad == 0 ? 0 : 1;
}
