/* The cost of making one 304-byte record durable, N times, in a 64 MiB file,
 * by how the file was prepared (mode):
 *   0: filled with 1 MiB write()s + fsync, then pwrite+fdatasync per record;
 *   1: the same fill, then a shared mapping + msync(MS_SYNC) of the record's page;
 *   2: append write()+fdatasync (as redis appendfsync always);  3: append+fsync;
 *   4: sparse (ftruncate), mapping + msync;  5: fallocate, mapping + msync;
 *   6: as 1;  7: as 1, page cache dropped after the fill (POSIX_FADV_DONTNEED);
 *   8: fallocate, zeroed through a mapping, then mapping + msync;
 *   9/10: as 7, then read back with pread / through a mapping;
 *   11: fallocate, filled with 4 KiB pwrite()s (what tvmq does), mapping + msync.
 * Build and run from the project root:
 *   gcc -O2 -o target/msync_folio bench/experiments/msync_folio.c
 *   for m in 1 11; do target/msync_folio $m 2000; done      (OUT=file on a disk)
 * Measured here: mode 1 400 us per record (each msync wrote
 * the record's whole 1 MiB folio: 2,048 sectors), modes 4-11 140-157 us (8 sectors). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int mode=atoi(argv[1]); int n=atoi(argv[2]); const char*path=getenv("OUT")?getenv("OUT"):"target/sx.dat";
  size_t sz=64<<20; char rec[304]; memset(rec,'x',304);
  unlink(path);
  int fd=open(path,O_RDWR|O_CREAT,0644);
  if(mode==0||mode==1||mode==4){ // preallocate written
    if(mode==4) { ftruncate(fd,sz);} else { char*z=calloc(1,1<<20); for(size_t o=0;o<sz;o+=1<<20) write(fd,z,1<<20); fsync(fd);} }
  if(mode==5){ fallocate(fd,0,0,sz); fsync(fd);}
  if(mode==6||mode==7){ char*z=calloc(1,1<<20); for(size_t o=0;o<sz;o+=1<<20) write(fd,z,1<<20); fsync(fd); if(mode==7){posix_fadvise(fd,0,sz,POSIX_FADV_DONTNEED);} }
  if(mode==9||mode==10){ char*z=calloc(1,1<<20); for(size_t o=0;o<sz;o+=1<<20) write(fd,z,1<<20); fsync(fd); posix_fadvise(fd,0,sz,POSIX_FADV_DONTNEED); if(mode==9){ for(size_t o=0;o<sz;o+=1<<20) pread(fd,z,1<<20,o);} else { char*mm=mmap(0,sz,PROT_READ,MAP_SHARED,fd,0); volatile long acc=0; for(size_t o=0;o<sz;o+=4096) acc+=mm[o]; munmap(mm,sz);} }
  if(mode==11){ fallocate(fd,0,0,sz); char*z=calloc(1,4096); double a=now(); for(size_t o=0;o<sz;o+=4096) pwrite(fd,z,4096,o); fsync(fd); fprintf(stderr,"fill %.3f s\n",now()-a);}
  if(mode==8){ fallocate(fd,0,0,sz); char*mm=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0); memset(mm,0,sz); msync(mm,sz,MS_SYNC); munmap(mm,sz);}
  char*m=0; if(mode==1||mode==4||mode==5||mode>=6){ double a0=now(); m=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);}
  double t0=now();
  for(int i=0;i<n;i++){
    size_t off=(size_t)i*320;
    if(mode==0){ pwrite(fd,rec,304,off); fdatasync(fd);}
    else if(mode==1||mode==4||mode==5||mode>=6){ memcpy(m+off,rec,304); size_t pg=off&~4095UL; size_t end=(off+320+4095)&~4095UL; msync(m+pg,end-pg,MS_SYNC);}
    else if(mode==2){ write(fd,rec,304); fdatasync(fd);} // append, redis-like
    else if(mode==3){ write(fd,rec,304); fsync(fd);}
  }
  double t=now()-t0; printf("mode %d: %.1f us/op, %.0f ops/s\n",mode,t/n*1e6,n/t);
  return 0;
}
