"""Chinese person names in everyday sentences (issue 47): the classes ``ChineseSegmentedNameRecognizer`` reads
from where the sentence puts a person, and the words and places each class must leave alone.

Each test names one class. The sentences are written for these tests, not drawn from any probe or evaluation set.
The recognizer runs alone (jieba's POS tagger, no NER), so the file runs in a few seconds.
"""
import pytest

from transforms.pii import recognizers as R


@pytest.fixture(scope="module")
def rec():
    assert R._jieba_posseg() is not None, "jieba is not installed: run `make install`"
    return R.ChineseSegmentedNameRecognizer()


def names(rec, text):
    return [text[s:e] for s, e in rec.find(text)]


# the object that closes a clause after a verb that takes a person; 叫 + the name a person bears ---------------
@pytest.mark.parametrize("text,expected", [
    ("下午我遇到了高峰。", []),             # a dictionary word above the cap: traffic's peak, not a person
    ("你把钥匙交给贺海燕。", ["贺海燕"]),
    ("这件事你问问车建华。", ["车建华"]),
    ("他女朋友叫金星。", ["金星"]),          # 叫 after a person: whatever the word means, it is her name
    ("我室友叫常青。", ["常青"]),
])
def test_object_of_a_person_verb_and_the_name_after_jiao(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "这种感觉叫幸福。",          # 叫 after a thing, and an adjective
    "我们终于找到了方向。",       # a frequent noun after a verb
    "山谷里传来了杜鹃的叫声。",   # a bird
    "为问杜鹃，何时归去。",       # 问 read as a noun; a bird
])
def test_words_after_verbs_stay_words(rec, text):
    assert names(rec, text) == []


# a role word's bearer before the predicate, an apposition, a rare name before a role ------------------------
@pytest.mark.parametrize("text,expected", [
    ("邻居黎明昨天搬走了。", ["黎明"]),
    ("我的同桌，汪洋，是杭州人。", ["汪洋"]),
    ("袁隆平院士一生研究水稻。", ["袁隆平"]),
])
def test_role_word_beside_the_name(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "出租车司机胡乱开价。",        # a frequent word that is no name after a role word
    "学生车票已经买好了。",        # a ticket
    "他是公司的常务副总经理。",    # a title's prefix before a role word
])
def test_role_word_before_a_thing(rec, text):
    assert names(rec, text) == []


# given names jieba reads as adjectives; compound family names; 小X/老X; family name + title -----------------
@pytest.mark.parametrize("text,expected", [
    ("邵宏伟下周去北京。", ["邵宏伟"]),
    ("这是汤浩然的书包。", ["汤浩然"]),
    ("东方明远下午要开会。", ["东方明远"]),
    ("老王今天请假了。", ["老王"]),
    ("小张帮我拿了快递。", ["小张"]),
    ("明天苏医生值班。", ["苏医生"]),
    ("韩老师布置了作业。", ["韩老师"]),
    ("请找一下高经理。", ["高经理"]),
])
def test_split_names_familiar_forms_and_titles(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "小米发布了新手机。",          # a brand jieba tags as a noun
    "小马过河的故事很有名。",
    "我想向老师请教一个问题。",    # 向: a preposition before the title
    "我和老师说好了。",            # 和: a conjunction
    "康师傅方便面很方便。",        # a brand made of a family name and a title
    "东方卫视今晚播出。",          # a compound family name that is also a word ("the East"), before a noun
])
def test_familiar_forms_and_titles_leave_brands_and_function_words(rec, text):
    assert names(rec, text) == []


# lists: an item beside a name the dictionary does not know --------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("周日值班的有常乐、孟佳桐和薛凯文。", ["常乐", "孟佳桐", "薛凯文"]),
    ("出席的有王世英、王明权、王荣生。", ["王世英", "王明权", "王荣生"]),  # "王明" + "权" read as one name
])
def test_list_items_beside_a_name(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text,words", [
    ("武威、金昌、张掖、酒泉都在甘肃。", ("张掖", "酒泉")),   # places the dictionary knows are never list items
    ("支持正则表达式、高亮和曲线的日志查看器。", ("曲线",)),  # a frequent noun beside an unknown word
])
def test_list_items_leave_places_and_words(rec, text, words):
    # the list's other words are what main's rules make of them; the list rule must add none of these
    found = names(rec, text)
    assert not set(words) & set(found), found


# family names added, villages, facilities -------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("晚安，傅晓东！", ["傅晓东"]),
    ("谢谢阎丽娜的帮助。", ["阎丽娜"]),
    ("一夜东风吹，韦庄《菩萨蛮》。", ["韦庄"]),  # a poet before his work's title: not a village
])
def test_family_names_and_poets(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "石家庄今天下雪了。",           # a city ending in 庄
    "他们住在崔庄。",
    "张江地铁站人很多。",           # a place before a facility
    "福州左海公园收养了一只海龟。",
    "电话里传来『洪峰』的消息。",   # 洪: a family name, but 洪峰 is a flood crest
    "这个陈列柜需要清洁。",         # furniture
])
def test_places_and_things_starting_with_a_family_name(rec, text):
    assert names(rec, text) == []


def test_facility_filter_reads_the_noun_not_the_verb(rec):
    # 站 is also "to stand": a name before the verb stays a name
    assert names(rec, "刘建军站在门口等你。") == ["刘建军"]


# foreign and minority names in transliteration --------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("卡尔说他明天不来了。", ["卡尔"]),
    ("我在车站见到了玛丽。", ["玛丽"]),
    ("约翰和安娜去旅行了。", ["约翰", "安娜"]),
    ("科恩部长昨天抵达北京。", ["科恩"]),
])
def test_foreign_names_where_a_person_stands(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "麦当劳的薯条很好吃。",          # brands jieba tags as names, before 的 and a noun
    "星巴克的咖啡太贵了。",
    "他上个月在洛桑表示支持。",      # a city after 在
    "本报驻科特迪瓦记者报道。",      # a country after 驻
    "我们去了曼谷、普吉、帕塔亚等地。",  # places listed with 、
])
def test_foreign_shaped_words_that_name_no_person(rec, text):
    assert names(rec, text) == []


def test_foreign_name_candidates_widen_the_clauses_read():
    # a clause with no family name but two transliteration characters is read; one with neither is not
    text = "今天天气很好。卡尔说他不来了。"
    assert R.ChineseSegmentedNameRecognizer.clauses(text) == [(7, 15)]


@pytest.mark.parametrize("text", [
    "楼下的孙阿姨超市关门了。",    # a shop named like a person, before the shop noun
    "我常去王师傅面馆吃面。",
])
def test_name_before_a_shop_noun_is_the_shop(rec, text):
    assert names(rec, text) == []


# names jieba cuts in the wrong place: a one-character verb or a floor glued to the family name, a family name
# after 的 with a given name read as an adverb or verb, a bound last character; 老/小 + a family name read as a noun
@pytest.mark.parametrize("text,expected", [
    ("这件事你去问柴志远吧。", ["柴志远"]),     # "问柴" + "志远"
    ("5楼祁红梅家的猫丢了。", ["祁红梅"]),      # "楼祁" + "红梅"
    ("对门的霍建新出差了。", ["霍建新"]),       # "霍" + "建新" (v)
    ("我同学胡佳怡在上海。", ["胡佳怡"]),       # "胡佳" + "怡" (vg)
    ("快去叫老黄。", ["老黄"]),                 # "老" + "黄" (n)
    ("小韩，明天别迟到。", ["小韩"]),           # a familiar form alone before a comma
])
def test_names_jieba_cuts_in_the_wrong_place(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "我去问问题。",                # 问 + a word, no family name after it
    "他的马立刻跑了。",            # after 的: 马 is a horse, 立刻 a frequent adverb
    "这件衣服太老旧了。",          # 老 + an adjective
    "3楼高层住户请注意。",         # a floor before a dictionary word
    "天气太热了，快去叫老板。",    # 老板 is a word
])
def test_cut_name_rules_leave_words(rec, text):
    assert names(rec, text) == []


@pytest.mark.parametrize("text,expected", [
    ("新华社记者李杰摄）", ["李杰"]),   # 摄 (photo by) closes a credit: not the name's last character
    ("王笑曰：“好。”", ["王笑"]),
])
def test_bound_suffix_not_before_punctuation(rec, text, expected):
    assert names(rec, text) == expected


# minority names read by character from the list of name parts, where a person stands ------------------------
@pytest.mark.parametrize("text,expected", [
    ("我的同桌叫阿依努尔，她数学特别好。", ["阿依努尔"]),   # jieba has no such word
    ("昨天跟达瓦聊了很久。", ["达瓦"]),                    # after a preposition that takes a person
    ("新来的实习生斯琴明天报到。", ["斯琴"]),              # after a role word
    ("请买买提·艾力同学到前台领取快递。", ["买买提·艾力"]),  # parts joined by a middle dot
])
def test_minority_names_where_a_person_stands(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "乌兰察布今年冬天特别冷。",     # a city that begins with a name part: the word goes on
    "格桑花开满了山坡。",           # a flower
    "扎西德勒！祝大家新年快乐。",   # a greeting
    "他在乌兰住了三年。",           # a place after 在
])
def test_minority_name_parts_inside_places_and_words(rec, text):
    assert names(rec, text) == []


# word names: a family name + a common word, where only a person stands ---------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("白云说她下周回老家。", ["白云"]),         # before a verb of speech
    ("你给方圆打个电话吧。", ["方圆"]),         # after 给 and before a verb of contact
    ("我们队的队长是高山。", ["高山"]),         # a role word, 是, and the word closing the clause
    ("楼上的韦建平又在装修。", ["韦建平"]),     # after 的: a given name jieba reads as a noun (建平, a county)
    ("白云明天把资料带过来。", ["白云"]),       # the subject opening the clause before a time word
    ("你问问林海，他有备用钥匙。", ["林海"]),   # after 问问 (tagged n), the object closing the clause
    ("我的发型师柏春生手艺很好。", ["柏春生"]),  # after an occupation
])
def test_word_names_in_a_persons_position(rec, text, expected):
    assert names(rec, text) == expected


@pytest.mark.parametrize("text", [
    "全班同学都来了。",       # all of the class before a title
    "和高层沟通一下。",       # a common noun after 和
    "我们要向高手学习。",     # a frequent noun after a preposition
    "孩子们一进门，高声说个不停。",   # how one speaks, before a verb of speech
    "艺术节下周开幕。",               # three characters before a time word: an event
    "高山昨天下了一场雪。",           # a frequent noun before a time word
])
def test_word_name_rules_leave_common_nouns(rec, text):
    assert names(rec, text) == []


# brands, teas and districts that begin with a family name ---------------------------------------------------
@pytest.mark.parametrize("text", [
    "我最喜欢喝谢瑞麟。",           # a list entry (a jeweller), whatever the verb
    "我们中午吃了李宁。",           # taken by a verb of eating
    "他爸爸买了两瓶金六福酒。",     # a product noun after the maker
    "徐汇有很多老洋房。",           # a district
])
def test_brands_and_districts_beginning_with_a_family_name(rec, text):
    assert names(rec, text) == []


@pytest.mark.parametrize("text,expected", [
    ("王芳的茶凉了。", ["王芳"]),           # a person's thing takes 的
    ("我请王芳吃饭。", ["王芳"]),           # 吃 after the name
])
def test_product_rules_leave_people(rec, text, expected):
    assert names(rec, text) == expected
