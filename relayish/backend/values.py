class Closure: pass
class ConstructorValue: pass
class RefValue: pass
def list_value(mod, items): raise NotImplementedError
def from_list_value(v): raise NotImplementedError
