import os, time, sys
T='/sys/kernel/tracing'
I=T+'/instances/tbx_capture'
try: os.rmdir(I)
except OSError: pass
os.mkdir(I)
def w(p, v):
    fd = os.open(I+'/'+p, os.O_WRONLY); os.write(fd, v.encode()); os.close(fd)
try:
    w('buffer_size_kb','64')
    w('trace_clock','boot')
    w('events/sched/sched_switch/enable','1')
    w('tracing_on','1')
    os.sched_setaffinity(0, {0})
    marks=[]
    fd = os.open(I+'/trace_marker', os.O_WRONLY)
    for i in range(60):
        if i % 10 == 0:
            m = 'tbx long marker %03d ' % i + 'x' * (150 + i)
        else:
            m = 'B|%d|tbx slice %03d' % (os.getpid(), i)
        os.write(fd, m.encode()); marks.append(m)
        if i % 20 == 5:
            time.sleep(0.2)  # > 2^27 ns: forces a time-extend record
        if i % 7 == 0:
            time.sleep(0.001)
    os.close(fd)
    w('tracing_on','0')
    for cpu in range(os.cpu_count()):
        st = open(I+'/per_cpu/cpu%d/stats' % cpu).read()
        print('cpu', cpu, st.split('\n')[0])
        fd = os.open(I+'/per_cpu/cpu%d/trace_pipe_raw' % cpu, os.O_RDONLY|os.O_NONBLOCK)
        pages=[]
        while True:
            try: b = os.read(fd, 4096)
            except BlockingIOError: break
            if not b: break
            pages.append(b)
        os.close(fd)
        print(' pages', len(pages), [len(p) for p in pages])
        open('cpu%d.pages' % cpu, 'wb').write(b''.join(pages))
    open('markers.txt','w').write('\n'.join(marks)+'\n')
    for g,e in [('sched','sched_switch'),('ftrace','print')]:
        open('%s.format' % e,'w').write(open(T+'/events/%s/%s/format'%(g,e)).read())
    open('header_page','w').write(open(T+'/events/header_page').read())
finally:
    os.rmdir(I)
