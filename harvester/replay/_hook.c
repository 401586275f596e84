/* The seal's audit hook in C: what every audited event of the process pays, made nothing.
 *
 * A Python audit hook is called for every audited event of the process (an import, an open, a socket
 * made, a request sent), and each call of Python code on a connection's way costs about a microsecond
 * there: on a loopback request the Python hook and name memory cost ~7 us of ~120. This hook decides
 * in C what it can decide without Python:
 *
 * - an event the seal does not watch: nothing (a few string compares);
 * - a watched event where no seal is in force (no case's seal in the OpenTelemetry context, no sealed
 *   replay running): nothing;
 * - a lookup of a name the policy allows, a connection to an address it allows or that was looked up
 *   by such a name (the policy's ``fast``: exact names and addresses, with their ports): nothing.
 *
 * Anything else (a name a pattern allows, the first time; a refusal; a process start) calls the Python
 * check (``_guard``), which decides and raises on a refusal.
 * ``remembering(lookup, resolved, limit)`` is ``socket.getaddrinfo`` that remembers which name each
 * address came from, as ``_guard.Guard.remembering`` does in Python; ``resolving(method, lookup)`` is a
 * socket's ``connect`` (``sendto``...) that puts a name it is given to the seal first, as
 * ``_guard.Guard.resolving`` does, at the cost of a type check for an address.
 *
 * Optional: a machine that cannot build it runs the same checks through the Python hook.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#ifdef _WIN32
#include <ws2tcpip.h>
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#endif

enum { NONE = 0, LOOKUP = 1, REACH = 2, START = 3, PROBE = 4, SOCKET = 5 };
#define PROBE_EVENT "harvester.seal.probe" /* raised by install: the hook says it is called */
#ifdef Py_T_OBJECT_EX
#define OBJECT_SLOT Py_T_OBJECT_EX
#else
#define OBJECT_SLOT T_OBJECT_EX
#endif
#define MAX_EVENTS 32

static char *watched[MAX_EVENTS];
static int kinds[MAX_EVENTS];
static Py_ssize_t n_watched = 0;
static PyObject *check = NULL;        /* the Python check: check(event, args) */
static PyObject *context_var = NULL;  /* OpenTelemetry's context variable, or None */
static PyObject *seal_key = NULL;     /* the context key of a case's seal */
static PyObject *suites = NULL;       /* the list of the sealed replays running now */
static PyObject *resolved = NULL;     /* address -> the name it was looked up by */
static PyObject *families = NULL;     /* the socket families made without a check (IP, local, netlink) */
static int hooked = 0; /* added to the runtime's hooks (it cannot be removed) */
static int probed = 0; /* the hook saw the probe */
static PyInterpreterState *sealed_interpreter = NULL; /* a C hook is the runtime's: other interpreters' events pass */
static PyTypeObject *seal_type = NULL; /* ``Seal``: its ``fast`` slot is what its policy allows as it stands */
static Py_ssize_t fast_offset = 0;

static int kind_of(const char *event) {
    for (Py_ssize_t i = 0; i < n_watched; i++) {
        if (event[0] == watched[i][0] && strcmp(event, watched[i]) == 0) {
            return kinds[i];
        }
    }
    return NONE;
}

/* The seal in force here (a new reference), NULL when none is; -1 on an error. A connection made while
 * the OpenTelemetry SDK exports is not the agent's: the Python check knows it, and this hook only ever
 * allows, so it need not ask. */
static int seal_here(PyObject **seal) {
    *seal = NULL;
    if (context_var != Py_None) {
        PyObject *ctx = NULL;
        if (PyContextVar_Get(context_var, NULL, &ctx) < 0) {
            return -1;
        }
        if (ctx != NULL && PyDict_Check(ctx)) {
            *seal = PyDict_GetItemWithError(ctx, seal_key);
            if (*seal == NULL && PyErr_Occurred()) {
                Py_DECREF(ctx);
                return -1;
            }
            if (*seal == Py_None) {
                *seal = NULL;
            }
            Py_XINCREF(*seal);
        }
        Py_XDECREF(ctx);
    }
    if (*seal == NULL && PyList_GET_SIZE(suites) > 0) {
        *seal = Py_NewRef(PyList_GET_ITEM(suites, PyList_GET_SIZE(suites) - 1));
    }
    return 0;
}

/* 1: ``fast`` (a name or address text -> None, any port; a port; or a frozenset of ports) allows ``host`` at
 * ``port``; 0: it does not say; -1: an error. */
static int fast_allows(PyObject *fast, PyObject *host, PyObject *port) {
    if (!PyUnicode_CheckExact(host) || !PyLong_CheckExact(port)) {
        return 0; /* exact types: no lookup below can run Python code */
    }
    PyObject *ports = PyDict_GetItemWithError(fast, host);
    if (ports == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (ports == Py_None) {
        return 1;
    }
    int found = 0;
    Py_INCREF(ports);
    if (PyLong_CheckExact(ports)) { /* the one port it may be reached at */
        long at = PyLong_AsLong(ports), asked = PyLong_AsLong(port);
        found = ((at == -1 || asked == -1) && PyErr_Occurred()) ? -1 : at == asked;
    } else if (PyFrozenSet_CheckExact(ports)) {
        found = PySet_Contains(ports, port);
    }
    Py_DECREF(ports);
    return found;
}

/* 1: the seal's policy allows this lookup or connection as it stands (``fast``); 0: ask the Python
 * check; -1: an error. */
static int allowed_here(int kind, PyObject *seal, PyObject *args) {
    if (kind == START || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 2) {
        return 0;
    }
    if (Py_TYPE(seal) != seal_type) {
        return 0; /* not a seal: the Python check says what it is */
    }
    PyObject *fast = *(PyObject **)((char *)seal + fast_offset); /* the seal's ``fast`` slot */
    if (fast == NULL || !PyDict_Check(fast)) {
        return 0;
    }
    Py_INCREF(fast);
    int found = 0;
    if (kind == LOOKUP) {
        found = fast_allows(fast, PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1));
    } else {
        /* a connection to (address, port, ...): its address allowed, or the name it was looked up by */
        PyObject *address = PyTuple_GET_ITEM(args, 1);
        if (PyTuple_CheckExact(address) && PyTuple_GET_SIZE(address) >= 2 &&
            PyUnicode_CheckExact(PyTuple_GET_ITEM(address, 0)) && PyLong_CheckExact(PyTuple_GET_ITEM(address, 1))) {
            PyObject *port = PyTuple_GET_ITEM(address, 1);
            PyObject *pair = PyTuple_GetSlice(address, 0, 2); /* an IPv4 address is itself */
            PyObject *name = pair == NULL ? NULL : PyDict_GetItemWithError(resolved, pair);
            Py_XDECREF(pair);
            if (name != NULL) {
                Py_INCREF(name);
                found = fast_allows(fast, name, port);
                Py_DECREF(name);
            } else if (PyErr_Occurred()) {
                found = -1;
            }
            if (found == 0) {
                found = fast_allows(fast, PyTuple_GET_ITEM(address, 0), port);
            }
        }
    }
    Py_DECREF(fast);
    if (found < 0) {
        PyErr_Clear(); /* an unhashable part: the Python check decides */
        return 0;
    }
    return found;
}

static int hook(const char *event, PyObject *args, void *data) {
    (void)data;
    int kind = kind_of(event);
    if (kind == PROBE) {
        probed = 1;
        return 0;
    }
    if (kind == NONE || check == NULL || PyInterpreterState_Get() != sealed_interpreter) {
        return 0;
    }
    if (kind == SOCKET && PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 2) {
        int common = PySet_Contains(families, PyTuple_GET_ITEM(args, 1)); /* socket.__new__(sock, family, ...) */
        if (common != 0) {
            return common < 0 ? -1 : 0; /* an IP, local or netlink socket: what connects is checked */
        }
    }
    PyObject *seal;
    if (seal_here(&seal) < 0) {
        return -1;
    }
    if (seal == NULL) {
        return 0; /* unsealed here */
    }
    int decided = allowed_here(kind, seal, args);
    Py_DECREF(seal);
    if (decided != 0) {
        return decided < 0 ? -1 : 0;
    }
    PyObject *name = PyUnicode_FromString(event);
    if (name == NULL) {
        return -1;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(check, name, args, NULL);
    Py_DECREF(name);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

static void forget_events(void) {
    for (Py_ssize_t i = 0; i < n_watched; i++) {
        free(watched[i]);
    }
    n_watched = 0;
}

/* The events to watch, from {event: kind}; 0 with an exception set when one is not a known kind. */
static int watch(PyObject *events) {
    if (PyDict_GET_SIZE(events) > MAX_EVENTS) {
        PyErr_SetString(PyExc_ValueError, "too many events");
        return 0;
    }
    Py_ssize_t pos = 0;
    PyObject *event, *kind;
    while (PyDict_Next(events, &pos, &event, &kind)) {
        const char *text = PyUnicode_AsUTF8(event);
        long value = PyLong_AsLong(kind);
        if (text == NULL || (value == -1 && PyErr_Occurred())) {
            forget_events();
            return 0;
        }
        if (value < LOOKUP || value > SOCKET) {
            forget_events();
            PyErr_Format(PyExc_ValueError, "an event's kind must be 1 to 5, not %ld", value);
            return 0;
        }
        watched[n_watched] = strdup(text);
        if (watched[n_watched] == NULL) {
            forget_events();
            PyErr_NoMemory();
            return 0;
        }
        kinds[n_watched++] = (int)value;
    }
    return 1;
}

/* The offset of ``fast`` in a seal (a slot), or -1 with an exception set. */
static Py_ssize_t fast_slot(PyObject *type) {
    PyObject *slot = PyObject_GetAttrString(type, "fast");
    if (slot == NULL) {
        return -1;
    }
    Py_ssize_t offset = -1;
    if (Py_IS_TYPE(slot, &PyMemberDescr_Type) && ((PyMemberDescrObject *)slot)->d_member->type == OBJECT_SLOT) {
        offset = ((PyMemberDescrObject *)slot)->d_member->offset;
    } else {
        PyErr_SetString(PyExc_TypeError, "the seal's type must hold ``fast`` in a slot");
    }
    Py_DECREF(slot);
    return offset;
}

static PyObject *install(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *events, *var, *seal, *running, *names, *kind_type, *common;
    PyObject *callable;
    if (!PyArg_ParseTuple(args, "OO!OOO!O!O!O!", &callable, &PyDict_Type, &events, &var, &seal, &PyList_Type, &running,
                          &PyDict_Type, &names, &PyType_Type, &kind_type, &PyFrozenSet_Type, &common)) {
        return NULL;
    }
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        /* a C hook is the runtime's: a subinterpreter seals itself with the Python hook, its own */
        PyErr_SetString(PyExc_RuntimeError, "the seal's C hook is for the main interpreter");
        return NULL;
    }
    if (check != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the seal's hook is installed already");
        return NULL;
    }
    if (var != Py_None && !PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "the context variable must be a ContextVar or None");
        return NULL;
    }
    Py_ssize_t offset = fast_slot(kind_type);
    if (offset < 0 || !watch(events)) {
        return NULL;
    }
    /* Added once; it decides nothing until ``check`` is set, and says it is live through the probe (a
     * hook already installed may veto a new one: then nothing would be sealed, silently). */
    if (!hooked && PySys_AddAuditHook(hook, NULL) < 0) {
        forget_events();
        return NULL;
    }
    hooked = 1;
    probed = 0;
    if (PySys_Audit(PROBE_EVENT, NULL) < 0 || !probed) {
        forget_events();
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "the seal's audit hook is not called: another audit hook refused it");
        }
        return NULL;
    }
    fast_offset = offset;
    seal_type = (PyTypeObject *)Py_NewRef(kind_type);
    context_var = Py_NewRef(var);
    seal_key = Py_NewRef(seal);
    suites = Py_NewRef(running);
    resolved = Py_NewRef(names);
    families = Py_NewRef(common);
    sealed_interpreter = PyInterpreterState_Get();
    check = Py_NewRef(callable); /* last: the hook decides from here on */
    Py_RETURN_NONE;
}

/* Whether ``name`` is an address (IPv4's dotted digits, or IPv6's colons), which names nothing: looking
 * it up must not replace the name it came from (psycopg looks a name up, then hands libpq the address). */
static int is_address(PyObject *name) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(name), dots = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(name, i);
        if (c == ':') {
            return 1;
        }
        if (c == '.') {
            dots++;
        } else if (c < '0' || c > '9') {
            return 0;
        }
    }
    return dots == 3;
}

/* remembering(lookup, resolved, limit) -> getaddrinfo: ``lookup``, remembering each address's name. */
static PyObject *remember(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *lookup = PyTuple_GET_ITEM(self, 0), *names = PyTuple_GET_ITEM(self, 1);
    PyObject *found = PyObject_Vectorcall(lookup, args, nargs, kwnames);
    if (found == NULL || !PyList_Check(found) || PyList_GET_SIZE(found) == 0) {
        return found;
    }
    PyObject *host = NULL;
    if (nargs > 0) {
        host = args[0];
    } else if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "host") == 0) {
                host = args[i];
            }
        }
    }
    PyObject *name;
    if (host != NULL && PyUnicode_Check(host)) {
        name = Py_NewRef(host);
    } else if (host != NULL && PyBytes_Check(host)) {
        /* an IDNA-encoded name (anyio's lookups pass bytes), ASCII by definition */
        name = PyUnicode_DecodeASCII(PyBytes_AS_STRING(host), PyBytes_GET_SIZE(host), "replace");
        if (name == NULL) {
            Py_DECREF(found);
            return NULL;
        }
    } else {
        return found;
    }
    if (is_address(name)) {
        Py_DECREF(name);
        return found;
    }
    if (PyDict_GET_SIZE(names) > PyLong_AsSsize_t(PyTuple_GET_ITEM(self, 2))) { /* checked by remembering */
        PyDict_Clear(names); /* a lookup is remembered until then: a connection follows it at once */
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++) {
        PyObject *entry = PyList_GET_ITEM(found, i); /* (family, type, proto, canonname, sockaddr) */
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 5) {
            continue;
        }
        PyObject *sockaddr = PyTuple_GET_ITEM(entry, 4);
        if (!PyTuple_Check(sockaddr) || PyTuple_GET_SIZE(sockaddr) < 2) {
            continue;
        }
        PyObject *pair = PyTuple_GetSlice(sockaddr, 0, 2); /* an IPv4 address is itself */
        if (pair == NULL || PyDict_SetItem(names, pair, name) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(name);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(pair);
    }
    Py_DECREF(name);
    return found;
}

static PyMethodDef remember_def = {"getaddrinfo", (PyCFunction)(void (*)(void))remember, METH_FASTCALL | METH_KEYWORDS,
                                   "getaddrinfo(host, port, family=0, type=0, proto=0, flags=0)\n--\n\n"
                                   "socket.getaddrinfo, remembering which name each address came from (the seal)."};

static PyObject *remembering(PyObject *module, PyObject *args) {
    PyObject *lookup, *names, *limit;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO!O!", &lookup, &PyDict_Type, &names, &PyLong_Type, &limit)) {
        return NULL;
    }
    if (PyLong_AsSsize_t(limit) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "the limit must be a size");
        }
        return NULL;
    }
    PyObject *held = PyTuple_Pack(3, lookup, names, limit);
    if (held == NULL) {
        return NULL;
    }
    PyObject *function = PyCFunction_New(&remember_def, held);
    Py_DECREF(held);
    return function;
}

/* ``resolving(method, lookup)``: ``method`` of ``socket.socket`` (``connect``, ``connect_ex``, ``sendto``,
 * ``sendmsg``, ``bind``: the address its last argument) that first calls ``lookup(sock, address)`` when the
 * address names its host by a name (text that is no IP address, or bytes): CPython looks such a name up
 * before it raises the event the seal checks. A method descriptor, so ``sock.connect(address)`` calls it
 * with the socket first, as it calls the socket type's own method. */
typedef struct {
    PyObject_HEAD PyObject *method;
    PyObject *lookup;
    vectorcallfunc vectorcall;
} Resolving;

/* 1: ``address`` is (host, port, ...) whose host is a name; 0: an address, a path, or none. */
static int names_a_host(PyObject *address) {
    if (!PyTuple_CheckExact(address) || PyTuple_GET_SIZE(address) < 2) {
        return 0;
    }
    PyObject *host = PyTuple_GET_ITEM(address, 0);
    if (PyBytes_Check(host) || PyByteArray_Check(host)) {
        return Py_SIZE(host) > 0; /* the Python side reads it */
    }
    if (!PyUnicode_Check(host)) {
        return 0;
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(host, &size);
    if (text == NULL) {
        PyErr_Clear();
        return 1; /* not even UTF-8: the Python side says what it is */
    }
    const char *zone = memchr(text, '%', (size_t)size); /* fe80::1%eth0 */
    size_t n = zone != NULL ? (size_t)(zone - text) : (size_t)size;
    char plain[64];
    unsigned char packed[16];
    if (size == 0) {
        return 0;
    }
    if (n >= sizeof plain) {
        return 1;
    }
    memcpy(plain, text, n);
    plain[n] = '\0';
    return inet_pton(AF_INET, plain, packed) != 1 && inet_pton(AF_INET6, plain, packed) != 1;
}

static PyObject *resolving_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Resolving *self = (Resolving *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs >= 2 && names_a_host(args[nargs - 1])) {
        PyObject *said = PyObject_CallFunctionObjArgs(self->lookup, args[0], args[nargs - 1], NULL);
        if (said == NULL) {
            return NULL; /* refused: the name never reaches a resolver */
        }
        Py_DECREF(said);
    }
    return PyObject_Vectorcall(self->method, args, nargsf, kwnames);
}

static PyObject *resolving_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static void resolving_dealloc(PyObject *self) {
    Py_XDECREF(((Resolving *)self)->method);
    Py_XDECREF(((Resolving *)self)->lookup);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *resolving_name(PyObject *self, void *closure) {
    (void)closure;
    return PyObject_GetAttrString(((Resolving *)self)->method, "__name__");
}

static PyMemberDef resolving_members[] = {
    {"__wrapped__", OBJECT_SLOT, offsetof(Resolving, method), READONLY, "the socket type's own method"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef resolving_getset[] = {
    {"__name__", resolving_name, NULL, "the method's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ResolvingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "harvester.replay._hook.Resolving",
    .tp_basicsize = sizeof(Resolving),
    .tp_dealloc = resolving_dealloc,
    .tp_vectorcall_offset = offsetof(Resolving, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A socket method that puts a name it is given to the seal before CPython looks it up.",
    .tp_members = resolving_members,
    .tp_getset = resolving_getset,
    .tp_descr_get = resolving_get,
};

static PyObject *resolving(PyObject *module, PyObject *args) {
    PyObject *method, *lookup;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO", &method, &lookup)) {
        return NULL;
    }
    Resolving *self = PyObject_New(Resolving, &ResolvingType);
    if (self == NULL) {
        return NULL;
    }
    self->method = Py_NewRef(method);
    self->lookup = Py_NewRef(lookup);
    self->vectorcall = resolving_call;
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(check, events, context_var, seal_key, suites, resolved, seal_type, families): add the hook, once."},
    {"remembering", remembering, METH_VARARGS,
     "remembering(lookup, resolved, limit): getaddrinfo that remembers each address's name."},
    {"resolving", resolving, METH_VARARGS,
     "resolving(method, lookup): a socket method that calls lookup(sock, address) first for a name."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_hook", "The seal's audit hook in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hook(void) {
    if (PyType_Ready(&ResolvingType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
