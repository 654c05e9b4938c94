/* A writer thread stores 304-byte records round a 320 MiB shared file
 * mapping for 3 s while a flusher, every 100 ms, makes the mapping durable:
 *   mode 0: no flusher;
 *   mode 1: msync(MS_SYNC) of the mapping (what tvmq's interval queues do);
 *   mode 2: pwrite with O_DIRECT|O_DSYNC from the mapping into a second region
 *           of the same file (no page-cache writeback of the mapping).
 * Prints the writer's rate and the flusher's time per flush.
 * Build and run from the project root:
 *   gcc -O2 -pthread -o target/mmap_writeback bench/experiments/mmap_writeback.c
 *   for m in 0 1 2; do target/mmap_writeback $m; done      (OUT=file on a disk)
 * Measured on this project's VM (ext4, virtio): 32.6, 7.7
 * (957 ms per msync) and 34.4 M records/s (160 ms per full O_DIRECT copy). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <stdatomic.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define SZ (320UL<<20)
static char*m; static int fd, dfd; static atomic_int stop; static int mode;
static long flushes; static double flush_time;
void* flusher(void*a){
  while(!stop){
    usleep(100000);
    double t=now();
    if(mode==1) msync(m,SZ,MS_SYNC);
    else if(mode==2){ for(size_t o=0;o<SZ;o+=4<<20){ if(pwrite(dfd,m+o,4<<20,SZ+o)<0){perror("pwrite");exit(1);} } }
    flush_time+=now()-t; flushes++;
  }
  return 0;
}
int main(int argc,char**argv){
  mode=atoi(argv[1]);
  const char*path=getenv("OUT")?getenv("OUT"):"target/dx.dat"; unlink(path);
  fd=open(path,O_RDWR|O_CREAT,0644); fallocate(fd,0,0,2*SZ);
  {char*z=calloc(1,4096); for(size_t o=0;o<2*SZ;o+=4096) pwrite(fd,z,4096,o); fsync(fd);}
  dfd=open(path,O_RDWR|O_DIRECT|O_DSYNC);
  m=mmap(0,SZ,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  memset(m,1,SZ);
  pthread_t th; if(mode) pthread_create(&th,0,flusher,0);
  char rec[304]; memset(rec,'x',304);
  double t0=now(); long n=0;
  while(now()-t0<3.0){ for(int k=0;k<100000;k++){ size_t off=((n++)%(SZ/320))*320; memcpy(m+off,rec,304);} }
  double el=now()-t0; stop=1; if(mode) pthread_join(th,0);
  printf("mode %d: %.1f M records/s, %ld flushes, %.1f ms each\n",mode,n/el/1e6,flushes,flushes?flush_time/flushes*1e3:0);
  return 0;
}
