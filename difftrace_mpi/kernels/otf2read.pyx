# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, language_level=3
"""C callbacks for the OTF2 event reader: Enter and Leave events collected into C arrays.

The ``otf2`` package calls a Python function per event (through ctypes, several
microseconds each); these callbacks are plain C functions that the OTF2 library calls
directly (``readers.otf2`` registers their addresses through the library's C API), so an
event costs an append.  The signatures are OTF2's ``OTF2_EvtReaderCallback_Enter`` /
``_Leave`` / ``_CallingContext*`` (location uint64, time uint64, position uint64, user
data, attribute list, then the event's own fields); each returns
``OTF2_CALLBACK_SUCCESS`` (0).

Past ``limit`` events (the memory budget) or when memory runs out the callbacks stop
keeping events and say so (``over_limit``, ``out_of_memory``); the reader checks after
every batch.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport realloc, free
from libc.string cimport memcpy

import numpy as np

cdef struct Events:
    uint32_t* region
    uint64_t* time
    uint8_t* enter
    Py_ssize_t count, cap, limit
    bint over_limit, out_of_memory
    Py_ssize_t calling_context          # CallingContext events seen (not kept)


cdef int _grow(Events* ev) noexcept nogil:
    cdef Py_ssize_t cap = ev.cap * 2 if ev.cap else 4096
    cdef uint32_t* region = <uint32_t*>realloc(ev.region, cap * sizeof(uint32_t))
    if region == NULL:
        return -1
    ev.region = region
    cdef uint64_t* time = <uint64_t*>realloc(ev.time, cap * sizeof(uint64_t))
    if time == NULL:
        return -1
    ev.time = time
    cdef uint8_t* enter = <uint8_t*>realloc(ev.enter, cap * sizeof(uint8_t))
    if enter == NULL:
        return -1
    ev.enter = enter
    ev.cap = cap
    return 0


cdef inline int _keep(Events* ev, uint64_t time, uint32_t region, uint8_t enter) noexcept nogil:
    if ev.over_limit or ev.out_of_memory:
        return 0
    if ev.count >= ev.limit:
        ev.over_limit = True
        return 0
    if ev.count >= ev.cap and _grow(ev) < 0:
        ev.out_of_memory = True
        return 0
    ev.region[ev.count] = region
    ev.time[ev.count] = time
    ev.enter[ev.count] = enter
    ev.count += 1
    return 0


cdef int _on_enter(uint64_t location, uint64_t time, uint64_t position, void* user, void* attributes,
                   uint32_t region) noexcept nogil:
    return _keep(<Events*>user, time, region, 1)


cdef int _on_leave(uint64_t location, uint64_t time, uint64_t position, void* user, void* attributes,
                   uint32_t region) noexcept nogil:
    return _keep(<Events*>user, time, region, 0)


cdef int _on_cc_enter(uint64_t location, uint64_t time, uint64_t position, void* user, void* attributes,
                      uint32_t context, uint32_t unwind_distance) noexcept nogil:
    (<Events*>user).calling_context += 1
    return 0


cdef int _on_cc_leave(uint64_t location, uint64_t time, uint64_t position, void* user, void* attributes,
                      uint32_t context) noexcept nogil:
    (<Events*>user).calling_context += 1
    return 0


cdef int _on_cc_sample(uint64_t location, uint64_t time, uint64_t position, void* user, void* attributes,
                       uint32_t context, uint32_t unwind_distance, uint32_t interrupt_generator) noexcept nogil:
    (<Events*>user).calling_context += 1
    return 0


cdef class Collector:
    """The events of one location, as the callbacks keep them."""
    cdef Events ev

    def __cinit__(self, Py_ssize_t limit):
        self.ev.limit = limit

    def __dealloc__(self):
        free(self.ev.region)
        free(self.ev.time)
        free(self.ev.enter)

    @property
    def user_data(self):
        """The address to pass as the callbacks' user data."""
        return <size_t>&self.ev

    @property
    def callbacks(self):
        """{"enter", "leave", "cc_enter", "cc_leave", "cc_sample"}: C function addresses."""
        return {"enter": <size_t>&_on_enter, "leave": <size_t>&_on_leave, "cc_enter": <size_t>&_on_cc_enter,
                "cc_leave": <size_t>&_on_cc_leave, "cc_sample": <size_t>&_on_cc_sample}

    @property
    def count(self):
        return self.ev.count

    @property
    def over_limit(self):
        return bool(self.ev.over_limit)

    @property
    def out_of_memory(self):
        return bool(self.ev.out_of_memory)

    @property
    def calling_context(self):
        return self.ev.calling_context

    def arrays(self):
        """(region uint32, time uint64, enter bool) of the events kept, as numpy arrays."""
        cdef Py_ssize_t n = self.ev.count
        region = np.empty(n, dtype=np.uint32)
        time = np.empty(n, dtype=np.uint64)
        enter = np.empty(n, dtype=np.uint8)
        cdef uint32_t[::1] r = region
        cdef uint64_t[::1] t = time
        cdef uint8_t[::1] e = enter
        if n:
            memcpy(&r[0], self.ev.region, n * sizeof(uint32_t))
            memcpy(&t[0], self.ev.time, n * sizeof(uint64_t))
            memcpy(&e[0], self.ev.enter, n * sizeof(uint8_t))
        return region, time, enter.view(bool)
