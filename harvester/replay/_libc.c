/* The seal where C code reaches out itself: connections a library makes past Python's socket module.
 *
 * Audit hooks see what goes through Python. A library that connects from its own C code (libpq under
 * psycopg, libcurl under pycurl, gRPC's C core, libuv under uvloop) or ``ctypes`` calling libc's
 * ``connect`` raise no audited event. Every one of them still calls the C library's ``connect``,
 * ``sendto``, ``sendmsg``, ``sendmmsg`` and its name lookups (``getaddrinfo``, ``gethostbyname``,
 * ``getnameinfo``, ``res_query``...) through its own table of imported functions (the GOT).
 * ``seal(check, suites, resolved, socket_type, limit)`` points those entries, in every object loaded now and
 * in every one loaded later (``dlopen`` is pointed here too), at the functions below; ``dlsym`` of one
 * of them (how ``ctypes`` finds ``connect``) answers with its function here.
 *
 * While no sealed replay runs (``suites`` empty) each function calls the C library's at once. While one
 * does, it puts the call to the seal's Python check, as the audit hook would (``socket.connect`` with a
 * stand-in socket holding the family, ``socket.getaddrinfo`` with the name and port), with the GIL taken
 * for it; a refusal is recorded by the check (it fails the case) and the call fails with ``EACCES``.
 * An address found by ``getaddrinfo`` here is remembered with its name, as Python's lookups are.
 *
 * Python's own objects are left alone for the socket calls (``_socket``, ``libpython``, the executable:
 * the audit hook sees those already), and so are the C library, the dynamic loader and this module.
 * Linux (ELF, glibc's ``dl_iterate_phdr``) only; elsewhere ``seal`` says so and does nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef int (*connect_f)(int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendto_f)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_f)(int, const struct msghdr *, int);
typedef int (*getaddrinfo_f)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
typedef int (*sendmmsg_f)(int, struct mmsghdr *, unsigned int, int);
typedef struct hostent *(*gethostbyname_f)(const char *);
typedef struct hostent *(*gethostbyname2_f)(const char *, int);
typedef int (*gethostbyname_r_f)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
typedef int (*gethostbyname2_r_f)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);
typedef int (*getnameinfo_f)(const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int);
typedef int (*res_query_f)(const char *, int, int, unsigned char *, int);
typedef void *(*dlopen_f)(const char *, int);
typedef void *(*dlsym_f)(void *, const char *);

static connect_f real_connect;
static sendto_f real_sendto;
static sendmsg_f real_sendmsg;
static getaddrinfo_f real_getaddrinfo;
static sendmmsg_f real_sendmmsg;
static gethostbyname_f real_gethostbyname;
static gethostbyname2_f real_gethostbyname2;
static gethostbyname_r_f real_gethostbyname_r;
static gethostbyname2_r_f real_gethostbyname2_r;
static getnameinfo_f real_getnameinfo;
static res_query_f real_res_query, real_res_search;
static dlopen_f real_dlopen;
static dlsym_f real_dlsym;

static PyObject *check = NULL;       /* the seal's Python check: check(event, args), raising on a refusal */
static PyObject *suites = NULL;      /* the sealed replays running now: empty, nothing is checked */
static PyObject *resolved = NULL;    /* (address, port) -> the name it was looked up by */
static PyObject *socket_type = NULL; /* socket_type(family, fd): what the check reads a socket's family from */
static Py_ssize_t max_resolved = 4096;
static pthread_mutex_t patching = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long seen_adds = 0; /* dl_iterate_phdr's count of objects loaded, at the last scan */
static int patched_objects = 0;

static int sealed_now(void) {
    /* read without the GIL: a size only grows and shrinks as replays start and end; a stale read at
     * the edge of one is the edge of its seal */
    return check != NULL && PyList_GET_SIZE(suites) > 0 && Py_IsInitialized();
}

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* The address a sockaddr holds, as Python's socket module gives it; NULL with an exception set. */
static PyObject *address_of(const struct sockaddr *addr, socklen_t len) {
    char text[INET6_ADDRSTRLEN];
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
        return Py_BuildValue("(si)", text, ntohs(in->sin_port));
    }
    if (addr->sa_family == AF_INET6 && len >= 24) { /* 24: RFC 2133's, without the scope, which Linux takes */
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        uint32_t scope = len >= (socklen_t)sizeof(struct sockaddr_in6) ? in6->sin6_scope_id : 0;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) { /* ::ffff:a.b.c.d, as gRPC connects: the IPv4 address */
            inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof text);
            return Py_BuildValue("(si)", text, ntohs(in6->sin6_port));
        }
        inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
        return Py_BuildValue("(siII)", text, ntohs(in6->sin6_port), ntohl(in6->sin6_flowinfo), scope);
    }
    if (addr->sa_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
        Py_ssize_t size = (Py_ssize_t)len - (Py_ssize_t)offsetof(struct sockaddr_un, sun_path);
        if (size <= 0) {
            return PyUnicode_FromString("");
        }
        if (un->sun_path[0] == '\0') { /* Linux's abstract namespace: bytes, as Python gives it */
            return PyBytes_FromStringAndSize(un->sun_path, size);
        }
        return PyUnicode_DecodeFSDefaultAndSize(un->sun_path, (Py_ssize_t)strnlen(un->sun_path, (size_t)size));
    }
    return PyBytes_FromStringAndSize((const char *)addr, (Py_ssize_t)len);
}

/* 0: the seal allows the call; -1: it refused (recorded by the check), errno set. The GIL is taken. */
static int put_to_seal(const char *event, PyObject *args) {
    if (args == NULL) {
        PyErr_Clear();
        errno = EACCES; /* fail closed: what cannot be described cannot be allowed */
        return -1;
    }
    PyObject *result = PyObject_CallFunction(check, "sO", event, args);
    Py_DECREF(args);
    if (result != NULL) {
        Py_DECREF(result);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_PermissionError)) { /* ``Sealed`` is one: anything else is a bug */
        PyErr_WriteUnraisable(check);
    }
    PyErr_Clear();
    errno = EACCES;
    return -1;
}

/* A UDP socket connected to port 0 of an IP address: nothing can be sent there. A resolver sorting the
 * addresses it found connects a datagram socket to each (c-ares does, in gRPC) only to learn the source
 * address it would use. Only UDP: on a raw or ICMP ("ping") socket the port means nothing, and what is sent
 * goes to the address. */
static int nowhere(int fd, const struct sockaddr *addr, socklen_t len) {
    int zero = 0, type = 0, protocol = 0;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        zero = ((const struct sockaddr_in *)addr)->sin_port == 0;
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        zero = ((const struct sockaddr_in6 *)addr)->sin6_port == 0;
    }
    socklen_t size = sizeof type;
    if (!zero || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) != 0 || type != SOCK_DGRAM) {
        return 0;
    }
    size = sizeof protocol;
    return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &size) == 0 && protocol == IPPROTO_UDP;
}

/* Whether a connection from ``fd`` to ``addr`` may be made: 0 yes, -1 refused (errno set). */
static int reach(const char *event, int fd, const struct sockaddr *addr, socklen_t len) {
    struct sockaddr_in unspecified;
    if (addr == NULL || len < (socklen_t)sizeof(sa_family_t) || !sealed_now()) {
        return 0;
    }
    if (finalizing()) { /* sealed to the end: no check can run now, so nothing is allowed */
        errno = EACCES;
        return -1;
    }
    if (addr->sa_family == AF_UNSPEC) {
        if (event[7] == 'c') { /* socket.connect: AF_UNSPEC dissolves a connection, reaching nothing */
            return 0;
        }
        if (len >= (socklen_t)sizeof unspecified) { /* a datagram to AF_UNSPEC goes out as IPv4: read so */
            memcpy(&unspecified, addr, sizeof unspecified);
            unspecified.sin_family = AF_INET;
            addr = (const struct sockaddr *)&unspecified;
        }
    }
    int saved = errno;
    if (event[7] == 'c' && nowhere(fd, addr, len)) { /* a connect: a datagram sent to port 0 is checked */
        errno = saved;
        return 0;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *sock = PyObject_CallFunction(socket_type, "ii", (int)addr->sa_family, fd);
    PyObject *address = sock == NULL ? NULL : address_of(addr, len);
    PyObject *args = address == NULL ? NULL : PyTuple_Pack(2, sock, address);
    Py_XDECREF(sock);
    Py_XDECREF(address);
    int decided = put_to_seal(event, args);
    PyGILState_Release(gil);
    if (decided == 0) {
        errno = saved;
    }
    return decided;
}

static int sealed_connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (reach("socket.connect", fd, addr, len) < 0) {
        return -1;
    }
    return real_connect(fd, addr, len);
}

static ssize_t sealed_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr, socklen_t len) {
    if (reach("socket.sendto", fd, addr, len) < 0) {
        return -1;
    }
    return real_sendto(fd, buf, n, flags, addr, len);
}

static ssize_t sealed_sendmsg(int fd, const struct msghdr *msg, int flags) {
    if (msg != NULL && reach("socket.sendmsg", fd, (const struct sockaddr *)msg->msg_name, msg->msg_namelen) < 0) {
        return -1;
    }
    return real_sendmsg(fd, msg, flags);
}

static int sealed_sendmmsg(int fd, struct mmsghdr *messages, unsigned int n, int flags) {
    for (unsigned int i = 0; messages != NULL && i < n; i++) {
        const struct msghdr *msg = &messages[i].msg_hdr;
        if (reach("socket.sendmsg", fd, (const struct sockaddr *)msg->msg_name, msg->msg_namelen) < 0) {
            return -1; /* nothing sent: a refused one among them refuses the call */
        }
    }
    return real_sendmmsg(fd, messages, n, flags);
}

/* A lookup C code makes past ``getaddrinfo`` (the C library's own resolver: ``gethostbyname``, a DNS
 * query of ``res_query``): 0 allowed, -1 refused (recorded by the check). */
static int lookup(const char *event, PyObject *(*args_of)(const void *), const void *what) {
    if (what == NULL || !sealed_now()) {
        return 0;
    }
    if (finalizing()) {
        return -1;
    }
    int saved = errno;
    PyGILState_STATE gil = PyGILState_Ensure();
    int decided = put_to_seal(event, args_of(what));
    PyGILState_Release(gil);
    errno = saved;
    return decided;
}

static PyObject *name_args(const void *name) {
    return Py_BuildValue("(N)", PyUnicode_DecodeASCII((const char *)name, (Py_ssize_t)strlen(name), "replace"));
}

static struct hostent *sealed_gethostbyname(const char *name) {
    if (lookup("socket.gethostbyname", name_args, name) < 0) {
        h_errno = NO_RECOVERY;
        return NULL;
    }
    return real_gethostbyname(name);
}

static struct hostent *sealed_gethostbyname2(const char *name, int family) {
    if (lookup("socket.gethostbyname", name_args, name) < 0) {
        h_errno = NO_RECOVERY;
        return NULL;
    }
    return real_gethostbyname2(name, family);
}

static int sealed_gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t size, struct hostent **result,
                                  int *error) {
    if (lookup("socket.gethostbyname", name_args, name) < 0) {
        *result = NULL;
        *error = NO_RECOVERY;
        return EACCES;
    }
    return real_gethostbyname_r(name, ret, buf, size, result, error);
}

static int sealed_gethostbyname2_r(const char *name, int family, struct hostent *ret, char *buf, size_t size,
                                   struct hostent **result, int *error) {
    if (lookup("socket.gethostbyname", name_args, name) < 0) {
        *result = NULL;
        *error = NO_RECOVERY;
        return EACCES;
    }
    return real_gethostbyname2_r(name, family, ret, buf, size, result, error);
}

/* The name a DNS query asks: checked as a name even where it reads as an address ("1.2.3.4", "fe80::1%x"),
 * which the other lookups answer without a query and ``res_query`` sends all the same. */
static PyObject *query_args(const void *name) {
    const char *text = name;
    size_t n = strlen(text);
    return Py_BuildValue("(N)", PyUnicode_FromFormat(n && text[n - 1] == '.' ? "%s" : "%s.", text));
}

static int sealed_res_query(const char *name, int class, int type, unsigned char *answer, int size) {
    if (lookup("socket.gethostbyname", query_args, name) < 0) {
        h_errno = NO_RECOVERY;
        return -1;
    }
    return real_res_query(name, class, type, answer, size);
}

static int sealed_res_search(const char *name, int class, int type, unsigned char *answer, int size) {
    if (lookup("socket.gethostbyname", query_args, name) < 0) {
        h_errno = NO_RECOVERY;
        return -1;
    }
    return real_res_search(name, class, type, answer, size);
}

typedef struct {
    const struct sockaddr *addr;
    socklen_t len;
} Address;

static PyObject *address_args(const void *what) {
    const Address *a = what;
    return Py_BuildValue("(Ni)", address_of(a->addr, a->len), 0);
}

static int sealed_getnameinfo(const struct sockaddr *addr, socklen_t len, char *host, socklen_t hostlen, char *serv,
                              socklen_t servlen, int flags) {
    Address asked = {addr, len};
    /* a name asked of an address is a query (PTR); a numeric answer, or none, is not */
    if (addr != NULL && host != NULL && hostlen > 0 && !(flags & NI_NUMERICHOST) &&
        (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) &&
        lookup("socket.getnameinfo", address_args, &asked) < 0) {
        return EAI_FAIL;
    }
    return real_getnameinfo(addr, len, host, hostlen, serv, servlen, flags);
}

/* Whether ``node`` is an address, not a name: looking it up gives no name to remember. */
static int numeric(const char *node) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, node, buf) == 1 || inet_pton(AF_INET6, node, buf) == 1 || strchr(node, ':') != NULL;
}

/* Each address found, remembered with the name it was looked up by (the GIL held). */
static void remember(const char *node, const struct addrinfo *found) {
    PyObject *name = PyUnicode_DecodeASCII(node, (Py_ssize_t)strlen(node), "replace");
    if (name == NULL) {
        PyErr_Clear();
        return;
    }
    if (PyDict_GET_SIZE(resolved) > max_resolved) {
        PyDict_Clear(resolved);
    }
    for (const struct addrinfo *ai = found; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_addr == NULL || (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)) {
            continue;
        }
        PyObject *address = address_of(ai->ai_addr, ai->ai_addrlen);
        PyObject *pair = address == NULL ? NULL : PyTuple_GetSlice(address, 0, 2);
        if (pair == NULL || PyDict_SetItem(resolved, pair, name) < 0) {
            PyErr_Clear();
        }
        Py_XDECREF(pair);
        Py_XDECREF(address);
    }
    Py_DECREF(name);
}

static int sealed_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                              struct addrinfo **res) {
    if (node == NULL || !sealed_now()) {
        return real_getaddrinfo(node, service, hints, res);
    }
    if (finalizing()) {
        return EAI_FAIL;
    }
    int saved = errno;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *port;
    if (service == NULL) {
        port = Py_NewRef(Py_None);
    } else if (service[0] >= '0' && service[0] <= '9') {
        port = PyLong_FromString(service, NULL, 10);
    } else {
        port = PyUnicode_DecodeASCII(service, (Py_ssize_t)strlen(service), "replace");
    }
    PyObject *host = PyUnicode_DecodeASCII(node, (Py_ssize_t)strlen(node), "replace");
    PyObject *args = (host == NULL || port == NULL) ? NULL : Py_BuildValue("(OOiiii)", host, port, 0, 0, 0, 0);
    Py_XDECREF(host);
    Py_XDECREF(port);
    int decided = put_to_seal("socket.getaddrinfo", args);
    PyGILState_Release(gil);
    if (decided < 0) {
        return EAI_FAIL;
    }
    errno = saved;
    int found = real_getaddrinfo(node, service, hints, res);
    if (found == 0 && res != NULL && *res != NULL && !numeric(node) && sealed_now() && !finalizing()) {
        gil = PyGILState_Ensure();
        remember(node, *res);
        PyGILState_Release(gil);
        errno = saved;
    }
    return found;
}

static void patch_loaded(void);

static void *sealed_dlopen(const char *file, int flags) {
    void *handle = real_dlopen(file, flags);
    if (handle != NULL) {
        patch_loaded(); /* the object and what it needs, pointed here before their code runs further */
    }
    return handle;
}

enum { SOCKETS = 1, LOADER = 2, SYMBOLS = 4 }; /* which redirects an object gets */

typedef struct {
    const char *name;
    void *to;
    int where;
    void **real; /* where the C library's own function is kept */
} Redirect;

static void *sealed_dlsym(void *handle, const char *symbol);

#define CHECKED(name, function) {name, (void *)sealed_##function, SOCKETS, (void **)&real_##function}
static Redirect redirects[] = {
    CHECKED("connect", connect),
    CHECKED("sendto", sendto),
    CHECKED("sendmsg", sendmsg),
    CHECKED("sendmmsg", sendmmsg),
    CHECKED("getaddrinfo", getaddrinfo),
    CHECKED("gethostbyname", gethostbyname),
    CHECKED("gethostbyname2", gethostbyname2),
    CHECKED("gethostbyname_r", gethostbyname_r),
    CHECKED("gethostbyname2_r", gethostbyname2_r),
    CHECKED("getnameinfo", getnameinfo),
    CHECKED("res_query", res_query),
    CHECKED("__res_query", res_query), /* <resolv.h> names them so */
    CHECKED("res_search", res_search),
    CHECKED("__res_search", res_search),
    {"dlopen", (void *)sealed_dlopen, LOADER, (void **)&real_dlopen},
    {"dlsym", (void *)sealed_dlsym, SYMBOLS, (void **)&real_dlsym},
};
#define N_REDIRECTS (sizeof redirects / sizeof redirects[0])

/* ``dlsym`` that answers with the checked function where it found the C library's own (ctypes, cffi). */
static void *sealed_dlsym(void *handle, const char *symbol) {
    void *found = real_dlsym(handle, symbol);
    for (size_t r = 0; found != NULL && r < N_REDIRECTS; r++) {
        if (redirects[r].where == SOCKETS && found == *redirects[r].real) {
            return redirects[r].to;
        }
    }
    return found;
}

static void *self_base = NULL; /* this module's own object: never pointed at itself */

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Which redirects an object gets. ``dlopen`` and ``dlsym`` find a library by their caller's object (its
 * RUNPATH, ``RTLD_NEXT``), so only Python's own loaders (absolute paths; ctypes' names) are pointed here:
 * an object a C library loads itself is pointed here at the next load Python makes. Python's own objects
 * keep their socket calls: the audit hook sees those. */
static int how_far(const struct dl_phdr_info *info) {
    const char *path = info->dlpi_name ? info->dlpi_name : "";
    const char *name = base_name(path);
    if ((void *)info->dlpi_addr == self_base || strncmp(name, "linux-vdso", 10) == 0 ||
        strncmp(name, "linux-gate", 10) == 0 || strncmp(name, "ld-linux", 8) == 0 || strncmp(name, "libc.so", 7) == 0 ||
        strncmp(name, "libc-", 5) == 0) {
        return 0;
    }
    if (path[0] == '\0' || strncmp(name, "libpython", 9) == 0 || strncmp(name, "_socket.", 8) == 0) {
        return LOADER | SYMBOLS; /* the executable, libpython (ctypes may be built in), the socket module */
    }
    if (strncmp(name, "_ctypes.", 8) == 0 || strncmp(name, "_cffi_backend.", 14) == 0) {
        return SOCKETS | LOADER | SYMBOLS; /* what Python code calls C through */
    }
    return SOCKETS;
}

static uintptr_t at(const struct dl_phdr_info *info, uintptr_t ptr) {
    /* glibc relocates the dynamic section's pointers as it loads an object; the vDSO's are offsets */
    return ptr < info->dlpi_addr ? ptr + info->dlpi_addr : ptr;
}

/* Point the table entry at ``slot`` to ``to``. The loader makes the whole pages of an object's RELRO
 * range read-only once it is loaded (its last page, shared with writable data, stays writable): an entry
 * there is made writable for the one write, then read-only again. An entry in a writable segment is
 * written; one anywhere else is left alone. */
static void point(const struct dl_phdr_info *info, uintptr_t slot, void *to) {
    void **entry = (void **)slot;
    if (*entry == to) {
        return;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = slot & ~(page - 1);
    int read_only = 0, writable = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t from = info->dlpi_addr + ph->p_vaddr, upto = from + ph->p_memsz;
        if (slot < from || slot + sizeof(void *) > upto) {
            continue;
        }
        if (ph->p_type == PT_GNU_RELRO && start + page <= (upto & ~(page - 1))) {
            read_only = 1;
        } else if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            writable = 1;
        }
    }
    if (read_only) {
        if (mprotect((void *)start, (size_t)page, PROT_READ | PROT_WRITE) == 0) {
            __atomic_store_n(entry, to, __ATOMIC_SEQ_CST);
            mprotect((void *)start, (size_t)page, PROT_READ);
        }
    } else if (writable) {
        __atomic_store_n(entry, to, __ATOMIC_SEQ_CST);
    }
}

static void patch_relocations(const struct dl_phdr_info *info, const ElfW(Rela) * rela, size_t size,
                              const ElfW(Sym) * symbols, const char *strings, int where) {
    for (size_t i = 0; i < size / sizeof(ElfW(Rela)); i++) {
        unsigned long type = ELF64_R_TYPE(rela[i].r_info);
#if defined(__x86_64__)
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
#else
        if (type != R_AARCH64_JUMP_SLOT && type != R_AARCH64_GLOB_DAT) continue;
#endif
        const ElfW(Sym) *symbol = &symbols[ELF64_R_SYM(rela[i].r_info)];
        if (symbol->st_name == 0 || symbol->st_shndx != SHN_UNDEF) {
            continue; /* defined here: not an import */
        }
        const char *name = strings + symbol->st_name;
        for (size_t r = 0; r < N_REDIRECTS; r++) {
            if ((redirects[r].where & where) && *redirects[r].real != NULL && strcmp(name, redirects[r].name) == 0) {
                point(info, info->dlpi_addr + rela[i].r_offset, redirects[r].to);
            }
        }
    }
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    int where = how_far(info);
    if (where == 0) {
        return 0;
    }
    const ElfW(Dyn) *dynamic = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        }
    }
    if (dynamic == NULL) {
        return 0;
    }
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_size = 0, rela_size = 0;
    int plt_rela = 1;
    for (const ElfW(Dyn) *d = dynamic; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)at(info, d->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)at(info, d->d_un.d_ptr); break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)at(info, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
        case DT_PLTREL: plt_rela = d->d_un.d_val == DT_RELA; break;
        case DT_RELA: rela = (const ElfW(Rela) *)at(info, d->d_un.d_ptr); break;
        case DT_RELASZ: rela_size = d->d_un.d_val; break;
        default: break;
        }
    }
    if (symbols == NULL || strings == NULL) {
        return 0;
    }
    if (jmprel != NULL && plt_rela) {
        patch_relocations(info, jmprel, jmprel_size, symbols, strings, where);
    }
    if (rela != NULL) {
        patch_relocations(info, rela, rela_size, symbols, strings, where);
    }
    patched_objects++;
    return 0;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

static void patch_loaded(void) {
    unsigned long long adds = 0;
    dl_iterate_phdr(count_adds, &adds);
    pthread_mutex_lock(&patching);
    if (adds != seen_adds) { /* an object was loaded since the last scan: point every one (idempotent) */
        seen_adds = adds;
        patched_objects = 0;
        dl_iterate_phdr(patch_object, NULL);
    }
    pthread_mutex_unlock(&patching);
}

static PyObject *seal(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *callable, *running, *names, *kind;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OO!O!On", &callable, &PyList_Type, &running, &PyDict_Type, &names, &kind, &limit)) {
        return NULL;
    }
    if (check != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the C library's calls are sealed already");
        return NULL;
    }
    Dl_info self;
    if (dladdr((void *)seal, &self) == 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot find the seal's own object");
        return NULL;
    }
    self_base = self.dli_fbase;
    for (size_t r = 0; r < N_REDIRECTS; r++) {
        void *found = dlsym(RTLD_DEFAULT, redirects[r].name);
        if (found != NULL) {
            *redirects[r].real = found;
        } else if (redirects[r].name[0] != '_' && strncmp(redirects[r].name, "res_", 4) != 0) {
            PyErr_Format(PyExc_RuntimeError, "the C library lacks %s, which the seal points at", redirects[r].name);
            return NULL;
        }
    }
    max_resolved = limit;
    suites = Py_NewRef(running);
    resolved = Py_NewRef(names);
    socket_type = Py_NewRef(kind);
    check = Py_NewRef(callable); /* set before the tables point here: a call finds it */
    Py_BEGIN_ALLOW_THREADS patch_loaded();
    Py_END_ALLOW_THREADS return PyLong_FromLong(patched_objects);
}

#define SUPPORTED 1
#else
#define SUPPORTED 0
static PyObject *seal(PyObject *module, PyObject *args) {
    (void)module;
    (void)args;
    PyErr_SetString(PyExc_NotImplementedError, "the C library's calls are sealed on Linux (x86-64, arm64) only");
    return NULL;
}
#endif

static PyMethodDef methods[] = {
    {"seal", seal, METH_VARARGS,
     "seal(check, suites, resolved, socket_type, limit) -> objects: point the C library's connect, sendto, "
     "sendmsg and getaddrinfo of every loaded object (and every one loaded later) at the seal's check."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_libc", "The seal where C code reaches out itself.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__libc(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddIntConstant(module, "SUPPORTED", SUPPORTED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
