"""Remembered py4j name lookups.

PySpark resolves every Column function by name each time it is called:
``sc._jvm.functions`` and ``getattr(functions, "col")`` are two round trips
to the JVM before the call itself, and py4j answers the first by trying
``Class.forName`` under each of the view's imports (each miss scans every
jar on Spark's class path) and the second by copying all of
``org.apache.spark.sql.functions``' methods. Measured on the 30-request
bundle: 1,047 ``r u`` and 1,045 ``r m`` commands of the 6,563 an analysis
sends, and the failed class loads alone 13% of the warm JVM's CPU samples
(Java Flight Recorder, 10 analyses).

A class or a static method found once stays what it is for the life of
the JVM, so the answers are kept on the Python side. Static fields are not
kept: their values can change.
"""
from __future__ import annotations


def remember(gateway) -> None:
    """Make ``gateway.jvm`` remember the classes it finds, and those classes
    the static methods and nested classes they find. Idempotent; a py4j
    without the expected classes is left as it is."""
    try:
        from py4j.java_gateway import JavaClass, JavaMember, JVMView
    except ImportError:
        return
    view = getattr(gateway, "jvm", None)
    if view is None or type(view) is not JVMView:
        return   # already remembering, or a view kdiag does not know

    class RememberingClass(JavaClass):
        def __getattr__(self, name):
            found = super().__getattr__(name)
            if type(found) is JavaClass:
                found.__class__ = RememberingClass
            if isinstance(found, (JavaClass, JavaMember)):
                self.__dict__[name] = found
            return found

    class RememberingView(JVMView):
        def __getattr__(self, name):
            found = super().__getattr__(name)
            if type(found) is JavaClass:
                found.__class__ = RememberingClass
                self.__dict__[name] = found
            return found

    view.__class__ = RememberingView
